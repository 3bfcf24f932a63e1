//! The HTML report of a modelled run (`ptovm run --model --report FILE`): one self-contained
//! page — inline SVG and CSS, no script, nothing fetched — that a browser opens from the file.
//! Utilization over time per pool and of the AICPUs, every core's utilization, and each
//! AICPU's time by what it did. The same run gives the same bytes.

use std::fmt::Write as _;

use ptovm_assembler::Module;
use ptovm_host_sim::model::ModelReport;

use crate::model::duration;

const WIDTH: f64 = 900.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
];

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The report's page.
pub fn html(m: &Module, r: &ModelReport, aicpus: u32) -> String {
    let mut s = String::new();
    let title = format!("{} — simulated time", esc(&m.workload));
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\n<style>\
         body{{font-family:sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse}}\
         td,th{{padding:2px 10px;text-align:right;border-bottom:1px solid #ddd}}th{{text-align:left}}\
         .legend span{{display:inline-block;margin-right:1.5em}}.sw{{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}}\
         </style></head><body>\n<h1>{title}</h1>\n"
    );
    let mach = &r.machine;
    let _ = writeln!(
        s,
        "<p>{} tasks on {aicpus} AICPUs, {} cube + {} vector cores; makespan <b>{}</b>; lower bound {} \
         (critical path {}, most work per usable core {}): {:.1} % of the makespan.</p>",
        r.run.tasks_total,
        mach.cube_cores,
        mach.vector_cores,
        duration(r.makespan_ns),
        duration(r.lower_bound_ns()),
        duration(r.critical_path_ns),
        duration(r.work_bound_ns),
        r.efficiency() * 100.0
    );
    s += "<h2>Cores</h2>\n<table><tr><th>pool</th><th>cores</th><th>tasks</th><th>utilization</th>\
          <th>idle: no task ready</th><th>idle: AICPU busy</th><th>idle: handshakes</th></tr>\n";
    for (name, p) in [("cube", &r.pools[0]), ("vector", &r.pools[1])] {
        let pct = |ns| p.share(ns, r.makespan_ns) * 100.0;
        let _ = writeln!(
            s,
            "<tr><th>{name}</th><td>{}</td><td>{}</td><td>{:.1} %</td><td>{:.1} %</td><td>{:.1} %</td><td>{:.1} %</td></tr>",
            p.cores,
            p.tasks,
            p.utilization(r.makespan_ns) * 100.0,
            pct(p.no_task_ns),
            pct(p.aicpu_ns),
            pct(p.handshake_ns)
        );
    }
    s += "</table>\n<h2>Utilization over time</h2>\n";
    s += &timeline(r, aicpus);
    s += "<h2>Every core</h2>\n";
    s += &per_core(r);
    s += "<h2>AICPUs</h2>\n";
    s += &per_aicpu(r);
    s += "</body></html>\n";
    s
}

/// Busy share over time: cube cores, vector cores, AICPUs (one line each, 0–100 %).
fn timeline(r: &ModelReport, aicpus: u32) -> String {
    let t = &r.timeline;
    let height = 240.0;
    let buckets = t.aicpu.len().max(1);
    let dx = WIDTH / buckets as f64;
    let capacity = [
        r.pools[0].cores as f64,
        r.pools[1].cores as f64,
        aicpus as f64,
    ];
    let series = [&t.busy[0], &t.busy[1], &t.aicpu];
    let names = ["cube cores", "vector cores", "AICPUs"];
    let mut s = format!(
        "<svg width=\"{}\" height=\"{}\" viewBox=\"-40 -10 {} {}\" xmlns=\"http://www.w3.org/2000/svg\">\n",
        WIDTH + 60.0,
        height + 40.0,
        WIDTH + 60.0,
        height + 40.0
    );
    for pct in [0, 25, 50, 75, 100] {
        let y = height * (1.0 - pct as f64 / 100.0);
        let _ = writeln!(
            s,
            "<line x1=\"0\" x2=\"{WIDTH}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/><text x=\"-6\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{pct} %</text>",
            y + 3.0
        );
    }
    for (k, (data, cap)) in series.iter().zip(capacity).enumerate() {
        let mut pts = String::new();
        for (i, busy) in data.iter().enumerate() {
            let share = if cap > 0.0 {
                (*busy as f64 / (cap * t.width_ns as f64)).min(1.0)
            } else {
                0.0
            };
            let _ = write!(
                pts,
                "{:.1},{:.1} ",
                (i as f64 + 0.5) * dx,
                height * (1.0 - share)
            );
        }
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>",
            COLORS[k],
            pts.trim_end()
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"0\" y=\"{:.1}\" font-size=\"11\">0</text><text x=\"{WIDTH}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{}</text>",
        height + 16.0,
        height + 16.0,
        esc(&duration(r.makespan_ns))
    );
    s += "</svg>\n<p class=\"legend\">";
    for (k, name) in names.iter().enumerate() {
        let _ = write!(
            s,
            "<span><i class=\"sw\" style=\"background:{}\"></i>{name}</span>",
            COLORS[k]
        );
    }
    let _ = writeln!(
        s,
        "</p><p>Each point is the busy share over {} of virtual time.</p>",
        esc(&duration(t.width_ns))
    );
    s
}

/// One bar per core: its utilization.
fn per_core(r: &ModelReport) -> String {
    let height = 120.0;
    let n = r.cores.len().max(1);
    let dx = WIDTH / n as f64;
    let mut s = format!(
        "<svg width=\"{}\" height=\"{}\" xmlns=\"http://www.w3.org/2000/svg\">\n",
        WIDTH,
        height + 20.0
    );
    for (i, c) in r.cores.iter().enumerate() {
        let share = ptovm_host_sim::model::share(c.busy_ns, r.makespan_ns);
        let h = height * share.min(1.0);
        let _ = writeln!(
            s,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{}\"><title>{} core {i} ({}): {} tasks, {:.1} % busy</title></rect>",
            i as f64 * dx,
            height - h,
            (dx - 1.0).max(0.5),
            COLORS[c.pool as usize],
            if c.pool == 0 { "cube" } else { "vector" },
            c.aicpu
                .map_or("shared".to_string(), |a| format!("AICPU {a}")),
            c.tasks,
            share * 100.0
        );
    }
    let _ = writeln!(
        s,
        "<line x1=\"0\" x2=\"{WIDTH}\" y1=\"{height}\" y2=\"{height}\" stroke=\"#888\"/></svg>\n\
         <p class=\"legend\"><span><i class=\"sw\" style=\"background:{}\"></i>cube</span>\
         <span><i class=\"sw\" style=\"background:{}\"></i>vector</span> (bar height: busy share of the makespan)</p>",
        COLORS[0], COLORS[1]
    );
    s
}

/// Each AICPU's time: in rounds, and between rounds by what held its generation up.
fn per_aicpu(r: &ModelReport) -> String {
    let parts = [
        "in rounds",
        "free",
        "window full",
        "watermarks",
        "predecessors",
        "read-back",
        "generated all",
    ];
    let colors = [
        "#1f77b4", "#c7c7c7", "#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#2ca02c",
    ];
    let mut s = String::from(
        "<table><tr><th>AICPU</th><th>tasks</th><th>rounds</th><th style=\"text-align:left\">time</th></tr>\n",
    );
    for (i, a) in r.aicpus.iter().enumerate() {
        let values = [
            a.busy_ns,
            a.idle_ns,
            a.window_ns,
            a.watermarks_ns,
            a.predecessors_ns,
            a.readback_ns,
            a.done_ns,
        ];
        let total: u64 = values.iter().sum::<u64>().max(1);
        let mut bar =
            String::from("<svg width=\"600\" height=\"14\" xmlns=\"http://www.w3.org/2000/svg\">");
        let mut x = 0.0;
        for (k, v) in values.iter().enumerate() {
            let w = 600.0 * *v as f64 / total as f64;
            if w > 0.0 {
                let _ = write!(
                    bar,
                    "<rect x=\"{x:.1}\" y=\"0\" width=\"{w:.1}\" height=\"14\" fill=\"{}\"><title>{}: {}</title></rect>",
                    colors[k],
                    parts[k],
                    esc(&duration(*v))
                );
            }
            x += w;
        }
        bar += "</svg>";
        let _ = writeln!(
            s,
            "<tr><th>{i}</th><td>{}</td><td>{}</td><td style=\"text-align:left\">{bar}</td></tr>",
            r.run.per_aicpu.get(i).copied().unwrap_or(0),
            a.rounds
        );
    }
    s += "</table>\n<p class=\"legend\">";
    for (k, p) in parts.iter().enumerate() {
        let _ = write!(
            s,
            "<span><i class=\"sw\" style=\"background:{}\"></i>{p}</span>",
            colors[k]
        );
    }
    s += "</p>\n";
    s
}
