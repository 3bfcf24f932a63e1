//! loom models of the runtime protocol's lock-free pieces (spec/runtime.md §4–5), run with
//! `RUSTFLAGS="--cfg loom" cargo test -p ptovm-host-sim --test loom --release`: every
//! interleaving (and memory-order outcome loom models) of a few threads is explored.
#![cfg(loom)]

use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use ptovm_host_sim::waitlist::{self, NIL};
use ptovm_vm::sched::reaches_first;

/// One waiter node: the next node of the list.
struct Node {
    next: AtomicU32,
}

/// `N` waiter nodes, none linked yet.
fn nodes<const N: usize>() -> Arc<[Node; N]> {
    Arc::new(core::array::from_fn(|_| Node {
        next: AtomicU32::new(NIL),
    }))
}

/// A successor's registrations (spec/runtime.md §4.1 steps 6–7), as `Aicpu::register` and
/// `Joins::open` make them: a hold on its `fanin` for each of its `n` predecessors, then
/// `register(i)` on each in turn, then the holds of those it did not register on taken back.
/// Returns whether it is ready then, and on how many it registered.
fn register_all(fanin: &AtomicU32, n: u32, mut register: impl FnMut(u32) -> bool) -> (bool, u32) {
    waitlist::expect(fanin, n);
    let mut used = 0;
    for i in 0..n {
        used += u32::from(register(i));
    }
    (waitlist::take_back(fanin, n - used, used), used)
}

/// A consumer registers on a producer while the producer completes: the consumer becomes ready
/// exactly once, and, if it registered, only after the producer completed.
#[test]
fn register_races_completion() {
    loom::model(|| {
        let head = Arc::new(AtomicU64::new(waitlist::pack(7, NIL)));
        let fanin = Arc::new(AtomicU32::new(0));
        let node = Arc::new(Node {
            next: AtomicU32::new(NIL),
        });
        let producer_done = Arc::new(AtomicBool::new(false));
        let ready = Arc::new(AtomicU32::new(0));

        let c = {
            let (head, fanin, node, done, ready) = (
                head.clone(),
                fanin.clone(),
                node.clone(),
                producer_done.clone(),
                ready.clone(),
            );
            thread::spawn(move || {
                let (now, registered) = register_all(&fanin, 1, |_| {
                    waitlist::register(&head, 7, 0, |first| {
                        node.next.store(first, Ordering::Relaxed)
                    })
                });
                if now {
                    assert!(
                        registered == 0 || done.load(Ordering::Acquire),
                        "ready before its predecessor completed"
                    );
                    ready.fetch_add(1, Ordering::Relaxed);
                }
                registered
            })
        };
        // The producer completes.
        producer_done.store(true, Ordering::Release);
        let mut cur = waitlist::close(&head, 7);
        while cur != NIL {
            assert_eq!(cur, 0);
            let next = node.next.load(Ordering::Acquire);
            if waitlist::release(&fanin) {
                ready.fetch_add(1, Ordering::Relaxed);
            }
            cur = next;
        }
        let registered = c.join().unwrap();
        assert_eq!(
            ready.load(Ordering::Relaxed),
            1,
            "the consumer became ready exactly once"
        );
        // A consumer that registered nothing left its hold: nobody takes it.
        assert_eq!(fanin.load(Ordering::Relaxed), 1 - registered);
    });
}

/// Two consumers register concurrently on one producer that completes meanwhile: each becomes
/// ready exactly once, and the producer notifies exactly those that registered.
#[test]
fn two_consumers_and_a_completion() {
    loom::model(|| {
        let head = Arc::new(AtomicU64::new(waitlist::pack(3, NIL)));
        let fanins = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
        let nodes = nodes::<2>();
        let ready = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
        let mut hs = Vec::new();
        for i in 0..2usize {
            let (head, fanins, nodes, ready) =
                (head.clone(), fanins.clone(), nodes.clone(), ready.clone());
            hs.push(thread::spawn(move || {
                let (now, _) = register_all(&fanins[i], 1, |_| {
                    waitlist::register(&head, 3, i as u32, |first| {
                        nodes[i].next.store(first, Ordering::Relaxed)
                    })
                });
                if now {
                    ready[i].fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let mut cur = waitlist::close(&head, 3);
        while cur != NIL {
            let i = cur as usize;
            let next = nodes[i].next.load(Ordering::Acquire);
            if waitlist::release(&fanins[i]) {
                ready[i].fetch_add(1, Ordering::Relaxed);
            }
            cur = next;
        }
        for h in hs {
            h.join().unwrap();
        }
        for r in ready.iter() {
            assert_eq!(r.load(Ordering::Relaxed), 1);
        }
    });
}

/// A producer completes and its slot is reused by a new task (another tag) while a consumer
/// registers with the old tag: the consumer either lands in the closed list (and is notified) or
/// registers nothing — never on the new task.
#[test]
fn slot_reuse_is_not_mistaken_for_the_old_task() {
    loom::model(|| {
        let head = Arc::new(AtomicU64::new(waitlist::pack(5, NIL)));
        let fanin = Arc::new(AtomicU32::new(0));
        let node = Arc::new(Node {
            next: AtomicU32::new(NIL),
        });
        let c = {
            let (head, fanin, node) = (head.clone(), fanin.clone(), node.clone());
            thread::spawn(move || {
                register_all(&fanin, 1, |_| {
                    waitlist::register(&head, 5, 0, |first| {
                        node.next.store(first, Ordering::Relaxed)
                    })
                })
                .1 == 1
            })
        };
        let first = waitlist::close(&head, 5);
        if first == 0 {
            waitlist::release(&fanin);
        }
        waitlist::open(&head, 6); // the slot's next task
        let registered = c.join().unwrap();
        assert_eq!(
            registered,
            first == 0,
            "registered on the old task iff its closed list held the node"
        );
        assert_eq!(
            head.load(Ordering::Relaxed),
            waitlist::pack(6, NIL),
            "nothing registered on the new task"
        );
        assert_eq!(
            fanin.load(Ordering::Relaxed),
            u32::from(!registered),
            "the one hold was dropped iff it registered"
        );
    });
}

/// Watermarks (§4.1 steps 1 and 4–5): an AICPU records its task in the map and then publishes a
/// watermark past it; another AICPU that sees the watermark finds the entry.
#[test]
fn watermark_publish_and_lookup() {
    loom::model(|| {
        let map = Arc::new(Mutex::new(Vec::<u64>::new()));
        let published = Arc::new(AtomicU64::new(0));
        let a = {
            let (map, published) = (map.clone(), published.clone());
            thread::spawn(move || {
                map.lock().unwrap().push(4); // record task 4
                published.store(9, Ordering::Release); // stage the next own task, id 9
            })
        };
        // AICPU B's task 6 may record once every other watermark is at least 6.
        if published.load(Ordering::Acquire) >= 6 {
            assert!(
                map.lock().unwrap().contains(&4),
                "a watermark past 4 implies task 4 is recorded"
            );
        }
        a.join().unwrap();
    });
}

/// The wake-up of §4.3: AICPU B, whose watermark check failed, announces the watermark it
/// needs, fences and checks again; AICPU A publishes two watermarks and scans for waiters after
/// the last (and after the first, or not: it scans every few), fencing before each scan and
/// waking only an AICPU whose announced need that scan's watermark is the first scanned one
/// to reach (`sched::reaches_first`). B then either sees a watermark that reaches its need or
/// is woken: it never sleeps with nobody to wake it — for a need the first watermark reaches,
/// the second, or neither.
#[test]
fn a_waiter_sees_the_watermark_or_is_woken() {
    for need in [2u64, 5, 6, 7] {
        for scan_first in [false, true] {
            loom::model(move || {
                let published = Arc::new(AtomicU64::new(0));
                let waiting_for = Arc::new(AtomicU64::new(u64::MAX));
                let woken = Arc::new(AtomicBool::new(false));
                let a = {
                    let (published, waiting_for, woken) =
                        (published.clone(), waiting_for.clone(), woken.clone());
                    thread::spawn(move || {
                        let mut scanned = 0;
                        for (mark, scan) in [(3u64, scan_first), (6, true)] {
                            published.store(mark, Ordering::Release);
                            if scan {
                                fence(Ordering::SeqCst);
                                let want = waiting_for.load(Ordering::Relaxed);
                                if reaches_first(scanned, want, mark) {
                                    woken.store(true, Ordering::Relaxed);
                                }
                                scanned = mark;
                            }
                        }
                    })
                };
                let saw = published.load(Ordering::Acquire) >= need || {
                    waiting_for.store(need, Ordering::SeqCst);
                    fence(Ordering::SeqCst);
                    published.load(Ordering::Acquire) >= need
                };
                a.join().unwrap();
                let reached = published.load(Ordering::Relaxed) >= need;
                assert!(
                    saw || woken.load(Ordering::Relaxed) || !reached,
                    "B sleeps past a watermark that reaches its need, with nobody to wake it"
                );
            });
        }
    }
}

/// The live-writer shortcut (§3.2, §4.1 step 5, §5): AICPU A records a write of tensor `x`
/// (its count goes up), publishes past it, its core writes the data, and A retires the writer
/// (the count goes down, Release). AICPU B, whose read of `x` is look-up-only, skips the map
/// when it sees the watermark and a count of 0 — and must then see the data (loom's cell
/// tracking fails the model on a read that could race with the write).
#[test]
fn live_writer_count_orders_the_skip_after_the_write() {
    loom::model(|| {
        let writers = Arc::new(AtomicU32::new(0));
        let published = Arc::new(AtomicU64::new(0));
        let data = Arc::new(loom::cell::UnsafeCell::new(0u32));
        let a = {
            let (writers, published, data) = (writers.clone(), published.clone(), data.clone());
            thread::spawn(move || {
                writers.fetch_add(1, Ordering::Relaxed); // record the write of task 4
                published.store(9, Ordering::Release); // stage the next own task
                data.with_mut(|p| unsafe { *p = 1 }); // the kernel runs
                writers.fetch_sub(1, Ordering::Release); // the writer retires
            })
        };
        // B's task 6 reads x, which nothing at or past id 5 writes (need = 5).
        if published.load(Ordering::Acquire) >= 5 && writers.load(Ordering::Acquire) == 0 {
            let seen = data.with(|p| unsafe { *p });
            assert_eq!(
                seen, 1,
                "a count of 0 past the watermark means the write is done"
            );
        }
        a.join().unwrap();
    });
}

/// The shards' spin lock (§3.2): two threads each do a read-modify-write of a plain value under
/// the lock; loom's cell tracking fails the model if the two accesses could overlap, and the
/// total shows that neither update was lost (which a Relaxed take or release would allow).
#[test]
fn spin_lock_excludes() {
    use ptovm_vm::spin::SpinLock;
    loom::model(|| {
        let lock = Arc::new(SpinLock::new(0u32));
        let other = {
            let lock = lock.clone();
            thread::spawn(move || {
                *lock.lock() += 1;
            })
        };
        {
            let mut g = lock.lock();
            let v = *g;
            *g = v + 2;
        }
        other.join().unwrap();
        assert_eq!(*lock.lock(), 3);
    });
}

/// The ready queue (`ptovm_vm::ring`, spec/runtime.md §3.1) on two cells, so positions wrap and
/// a push can find it full: (1) two producers push one value each while a consumer pops; (2) one
/// producer pushes three values while a consumer pops them. Every value comes out exactly once,
/// in push order per producer, and never before the producer's write of it (loom checks the
/// Release/Acquire pairing on the cell's sequence). Spinning on a full or empty ring is bounded
/// by the preemption bound.
#[test]
fn ready_ring_loses_and_duplicates_nothing() {
    use ptovm_vm::ring::{Cell, Ring};
    for (producers, each) in [(2u32, 1u32), (1, 3)] {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(move || {
            let q = Arc::new(Ring::new(vec![Cell::default(), Cell::default()]).unwrap());
            let threads: Vec<_> = (0..producers)
                .map(|p| {
                    let q = q.clone();
                    thread::spawn(move || {
                        for k in 0..each {
                            while q.push(p * 10 + k).is_err() {
                                thread::yield_now();
                            }
                        }
                    })
                })
                .collect();
            let mut got = Vec::new();
            while got.len() < (producers * each) as usize {
                match q.pop() {
                    Some(v) => got.push(v),
                    None => thread::yield_now(),
                }
            }
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(q.pop(), None);
            for p in 0..producers {
                let mine: Vec<u32> = got.iter().filter(|v| **v / 10 == p).copied().collect();
                assert_eq!(mine, (0..each).map(|k| p * 10 + k).collect::<Vec<_>>());
            }
        });
    }
}

/// The AICore handshake (`ptovm_vm::handshake`, seed 003 §4.1): the AICPU writes a task's record
/// and assigns the task; the core takes it, must see the record, writes a result and finishes;
/// the AICPU, once it sees the core idle, must see the result and may assign the next task,
/// which the core takes only after the first one. Weakening the Release of `assign` fails the
/// model. Weakening `finish` to Relaxed does not: loom 0.7 does not find the stale read of the
/// result that this allows (a two-thread litmus test of the same shape passes under it too), so
/// that ordering rests on the argument of spec/runtime.md §3.4.
#[test]
fn handshake_hands_over_records_and_results() {
    use ptovm_vm::handshake::{CoreSlot, VECTOR};
    loom::model(|| {
        let slot = Arc::new(CoreSlot::default());
        let record = Arc::new(AtomicU32::new(0));
        let result = Arc::new(AtomicU32::new(0));
        slot.set_up(VECTOR);
        let core = {
            let (slot, record, result) = (slot.clone(), record.clone(), result.clone());
            thread::spawn(move || {
                let mut done = 0;
                while done < 2 {
                    match slot.take() {
                        Some(task) => {
                            assert_eq!(record.load(Ordering::Relaxed), task as u32);
                            result.store(task as u32 * 10, Ordering::Relaxed);
                            slot.finish();
                            done += 1;
                        }
                        None => thread::yield_now(),
                    }
                }
            })
        };
        for task in [1u64, 2] {
            record.store(task as u32, Ordering::Relaxed);
            slot.assign(task).unwrap();
            while !slot.idle() {
                thread::yield_now();
            }
            assert_eq!(result.load(Ordering::Relaxed), task as u32 * 10);
        }
        core.join().unwrap();
    });
}

/// Shared cores (spec/runtime.md §4.6): two AICPUs claim the one free core while a third gives
/// a second one back; no core is handed out twice, and an AICPU that found none and announced
/// itself either sees the returned core on its re-check or is named to be woken.
#[test]
fn shared_cores_are_claimed_once_and_no_wakeup_is_lost() {
    use ptovm_vm::sched::{cores, Padded};
    loom::model(|| {
        // Cores 0 and 1 of one pool; core 1 is running a task of AICPU 2.
        let bits = Arc::new([AtomicU64::new(0b01)]);
        let waiters = Arc::new(Padded::new(0));
        let claimers: Vec<_> = (0..2u32)
            .map(|me| {
                let (bits, waiters) = (bits.clone(), waiters.clone());
                thread::spawn(move || {
                    let pool = cores::Span::new(0..2);
                    if let Some(c) = pool.claim(&bits[..]) {
                        return (Some(c), false);
                    }
                    // None free: announce, look again; none still: it would sleep.
                    cores::announce(&waiters, me);
                    if pool.any_free(&bits[..]) {
                        return (pool.claim(&bits[..]), false);
                    }
                    (None, true)
                })
            })
            .collect();
        // AICPU 2 sees core 1 finish and gives it back, then wakes whoever waits.
        cores::give_back(&bits[..], 1);
        let woken = cores::waiting(&waiters, 2);
        let got: Vec<(Option<u32>, bool)> =
            claimers.into_iter().map(|h| h.join().unwrap()).collect();
        let cores_taken: Vec<u32> = got.iter().filter_map(|g| g.0).collect();
        assert!(
            cores_taken.len() < 2 || cores_taken[0] != cores_taken[1],
            "a core handed out twice: {got:?}"
        );
        for (me, (_, slept)) in got.iter().enumerate() {
            // A sleeper must be named to be woken, unless the other claimer took the returned
            // core (then nothing was free for it, and a later return wakes it).
            if *slept && cores_taken.len() < 2 {
                assert!(
                    woken & (1 << me) != 0,
                    "AICPU {me} sleeps with a core free and no wake-up: {got:?}"
                );
            }
        }
        // The cores not taken are free again.
        let free = cores::Span::new(0..2).free(&bits[..]);
        assert_eq!(free as usize + cores_taken.len(), 2);
    });
}

/// Core limits (spec/runtime.md §4.6): kernel with limit 1 whose one unit AICPU 2 holds (its
/// task is running); AICPUs 0 and 1 each want one while AICPU 2 gives it back. The unit is
/// never taken twice, and an AICPU that found none and announced itself either gets the unit on
/// its second look or is named to be woken.
#[test]
fn core_limit_units_are_taken_once_and_no_wakeup_is_lost() {
    use ptovm_vm::sched::{cores, limits, Padded};
    loom::model(|| {
        let running = Arc::new(AtomicU32::new(1));
        let waiters = Arc::new(Padded::new(0));
        let takers: Vec<_> = (0..2u32)
            .map(|me| {
                let (running, waiters) = (running.clone(), waiters.clone());
                thread::spawn(move || {
                    if limits::take(&running, 1) {
                        return (true, false);
                    }
                    cores::announce(&waiters, me);
                    if limits::take(&running, 1) {
                        return (true, false);
                    }
                    (false, true)
                })
            })
            .collect();
        limits::give_back(&running);
        let woken = cores::waiting(&waiters, 2);
        let got: Vec<(bool, bool)> = takers.into_iter().map(|h| h.join().unwrap()).collect();
        let taken = got.iter().filter(|g| g.0).count();
        assert!(taken <= 1, "a unit of limit 1 taken twice: {got:?}");
        assert_eq!(running.load(Ordering::Relaxed) as usize, taken);
        for (me, (_, slept)) in got.iter().enumerate() {
            if *slept && taken == 0 {
                assert!(
                    woken & (1 << me) != 0,
                    "AICPU {me} sleeps with the unit free and no wake-up: {got:?}"
                );
            }
        }
    });
}

/// The Chase-Lev deque of `ready = work_steal` (`ptovm_vm::deque`, seed 003 §3): the owner
/// pushes two values and pops until empty while a thief steals (once, or twice with two
/// thieves). Every value is taken exactly once (the owner and a thief racing for the last one:
/// one wins), and a thief that takes a value sees it (the push's Release fence before the new
/// bottom, paired with the thief's Acquire of it). Removing the SeqCst fence of `pop` or of
/// `steal` fails the model.
#[test]
fn stealable_deque_takes_every_value_exactly_once() {
    use ptovm_vm::deque::Deque;
    use ptovm_vm::ring::Cell;
    for thieves in [1u32, 2] {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(move || {
            let d = Arc::new(Deque::new(vec![Cell::default(), Cell::default()]).unwrap());
            let stolen: Vec<_> = (0..thieves)
                .map(|_| {
                    let d = d.clone();
                    thread::spawn(move || d.steal())
                })
                .collect();
            d.push(1).unwrap();
            d.push(2).unwrap();
            let mut got = Vec::new();
            while let Some(v) = d.pop() {
                got.push(v);
            }
            for t in stolen {
                got.extend(t.join().unwrap());
            }
            // What a thief missed (it found the deque empty or lost a race) is still there.
            while let Some(v) = d.steal() {
                got.push(v);
            }
            got.sort_unstable();
            assert_eq!(got, vec![1, 2], "every value once");
        });
    }
}

/// A join (spec/runtime.md §4.7) registered on two writers — one completing on another thread,
/// one on the join's own AICPU — while a task registers on the join: the task becomes ready
/// exactly once, and only after both writers completed; the last writer's release closes the
/// join (whichever thread it runs on), and once the AICPU sees it closed it may reopen it with
/// another tag, on which the old tag registers nothing.
#[test]
fn a_join_releases_its_task_after_all_its_writers() {
    loom::model(|| {
        // Writers' lists (tags 1 and 2), the join's list (tag 9) and fanin, the task's
        // fanin. Nodes: 0 and 1 the join's registrations on the writers, 2 the task's on the
        // join.
        let writers = Arc::new([
            AtomicU64::new(waitlist::pack(1, NIL)),
            AtomicU64::new(waitlist::pack(2, NIL)),
        ]);
        let join = Arc::new(AtomicU64::new(waitlist::pack(9, NIL)));
        let join_fanin = Arc::new(AtomicU32::new(0));
        let task_fanin = Arc::new(AtomicU32::new(0));
        let nodes = nodes::<3>();
        let done = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let ready = Arc::new(AtomicU32::new(0));
        // The join's last hold gone: it closes and releases the task
        // (`retire::complete_waitable`).
        let complete_join = {
            let (join, task_fanin, nodes, done, ready) = (
                join.clone(),
                task_fanin.clone(),
                nodes.clone(),
                done.clone(),
                ready.clone(),
            );
            move || {
                let mut cur = waitlist::close_open(&join);
                while cur != NIL {
                    assert_eq!(cur, 2, "only the task waits on the join");
                    let next = nodes[2].next.load(Ordering::Acquire);
                    if waitlist::release(&task_fanin) {
                        assert!(
                            done.iter().all(|d| d.load(Ordering::Acquire)),
                            "the task became ready before a writer completed"
                        );
                        ready.fetch_add(1, Ordering::Relaxed);
                    }
                    cur = next;
                }
            }
        };
        // A release of the join's fanin: the last one completes it (`retire::release_join`).
        let release_join = {
            let (join_fanin, complete_join) = (join_fanin.clone(), complete_join.clone());
            move || {
                if waitlist::release(&join_fanin) {
                    complete_join();
                }
            }
        };
        // A writer's completion: close its list, release what registered on it (the join).
        let complete = {
            let (writers, nodes, done, release_join) = (
                writers.clone(),
                nodes.clone(),
                done.clone(),
                release_join.clone(),
            );
            move |w: usize| {
                done[w].store(true, Ordering::Release);
                let mut cur = waitlist::close(&writers[w], w as u32 + 1);
                while cur != NIL {
                    assert_eq!(cur as usize, w, "only the join waits on writer {w}");
                    let next = nodes[w].next.load(Ordering::Acquire);
                    release_join();
                    cur = next;
                }
            }
        };
        let other = {
            let complete = complete.clone();
            thread::spawn(move || complete(0))
        };
        // The join's AICPU: registers the join on both writers (completing it at once if
        // both have completed), registers the task on the join; its own writer completes
        // last.
        let (now, _) = register_all(&join_fanin, 2, |w| {
            waitlist::register(&writers[w as usize], w + 1, w, |first| {
                nodes[w as usize].next.store(first, Ordering::Relaxed)
            })
        });
        if now {
            complete_join();
        }
        let (now, registered) = register_all(&task_fanin, 1, |_| {
            waitlist::register(&join, 9, 2, |first| {
                nodes[2].next.store(first, Ordering::Relaxed)
            })
        });
        if now {
            assert!(
                registered == 0 || done.iter().all(|d| d.load(Ordering::Acquire)),
                "the task became ready before a writer completed"
            );
            ready.fetch_add(1, Ordering::Relaxed);
        }
        complete(1);
        other.join().unwrap();
        assert_eq!(
            ready.load(Ordering::Relaxed),
            1,
            "the task became ready once"
        );
        assert!(
            waitlist::completed(&join, 9),
            "the last release closed the join"
        );
        // Reused for another region: the old tag registers nothing on it.
        waitlist::open(&join, 10);
        assert!(!waitlist::register(&join, 9, 2, |_| {}));
        assert_eq!(join.load(Ordering::Relaxed), waitlist::pack(10, NIL));
    });
}

/// A written-once table (spec/runtime.md §4.8) of tensor 0 of rank `rank`, one column and
/// reach 1 — two rows of join words, two cells — for `handles` handles, and its words (inside
/// a model: they are loom's).
fn one_column_table(
    rank: u8,
    handles: usize,
) -> (ptovm_vm::sched::OnceTables, Arc<Vec<AtomicU64>>) {
    use ptovm_vm::sched::{OnceTables, ONCE_TABLES};
    let shape = ptovm_vm::share::OnceShape {
        rank,
        cols: 1,
        reach: 1,
    };
    let words = ONCE_TABLES + 8;
    let t = OnceTables::lay_out([(0u16, shape)].into_iter(), words, handles);
    assert!(t.has(0), "the table fits");
    (t, Arc::new((0..words).map(|_| AtomicU64::new(0)).collect()))
}

/// A written-once table's cell (spec/runtime.md §4.8) is filed and read without a lock: its
/// writer files it before publishing its watermark, a reader of its row reads it once that
/// watermark reaches its need, and the writer of the row that takes the cell next (`rows`
/// rows later) files it only once the reader's watermark reaches its own need. A task whose
/// need is not reached yet records nothing (it would wait). The reader sees the first writer,
/// never the second, and the stores race no load.
#[test]
fn a_written_once_cell_is_read_between_its_writers() {
    use ptovm_vm::{Dir, Io};
    let point = |r: i64, dir: Dir| {
        let mut io = Io {
            tensor: 0,
            dir: dir as u8,
            ndims: 1,
            ..Io::default()
        };
        io.ranges[0] = (r, r + 1);
        io
    };
    loom::model(move || {
        // Rows 0 and 2 share a cell.
        let (t, words) = one_column_table(1, 3);
        // The watermarks of the first writer (task 1) and of the reader (task 2).
        let marks = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let first = {
            let (words, marks) = (words.clone(), marks.clone());
            thread::spawn(move || {
                assert!(t.write(&words, &point(0, Dir::Out), 1, 0));
                marks[0].store(1, Ordering::Release);
            })
        };
        let reader = {
            let (words, marks) = (words.clone(), marks.clone());
            thread::spawn(move || {
                if marks[0].load(Ordering::Acquire) == 0 {
                    return;
                }
                let mut found = Vec::new();
                let answered = t.read(&words, &point(0, Dir::In), |w| {
                    found.push((w.id, w.handle));
                    Ok::<(), ()>(())
                });
                assert_eq!(answered, Ok(true));
                assert_eq!(found, [(1, 0)], "the reader sees its row's writer");
                marks[1].store(1, Ordering::Release);
            })
        };
        // The writer of row 2 (task 3), whose need covers the reader.
        if marks[1].load(Ordering::Acquire) != 0 {
            assert!(
                t.write(&words, &point(2, Dir::Out), 3, 2),
                "row 2 takes the cell"
            );
        }
        first.join().unwrap();
        reader.join().unwrap();
        assert!(!t.spilled(&words, 0));
    });
}

/// A task that may wait for a row's writer through joins (spec/runtime.md §4.7): its fanin,
/// whether it registered (then it may become ready only once the writer completed), the
/// writer's completion, and how many times it became ready.
#[derive(Clone)]
struct Waiting {
    fanin: Arc<AtomicU32>,
    waits: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    ready: Arc<AtomicU32>,
}

impl Waiting {
    fn new() -> Waiting {
        Waiting {
            fanin: Arc::new(AtomicU32::new(0)),
            waits: Arc::new(AtomicBool::new(false)),
            done: Arc::new(AtomicBool::new(false)),
            ready: Arc::new(AtomicU32::new(0)),
        }
    }

    /// A predecessor drops its hold on the task: the last one makes it ready.
    fn release(&self) {
        if waitlist::release(&self.fanin) {
            self.became_ready();
        }
    }

    /// The task is ready: once, and only after the writer completed if it registered.
    fn became_ready(&self) {
        assert!(
            !self.waits.load(Ordering::Relaxed) || self.done.load(Ordering::Acquire),
            "the task became ready before the writer completed"
        );
        self.ready.fetch_add(1, Ordering::Relaxed);
    }

    /// The task's registration on `list` (tag `tag`, node `node` of `nodes`).
    fn register_on(&self, list: &AtomicU64, tag: u32, node: u32, nodes: &[Node]) {
        if register_on(&self.fanin, list, (tag, node), nodes, &self.done) {
            self.became_ready();
        }
    }
}

/// A task's or a join's one registration (tag `tag`, node `node` of `nodes`) on `list`, whose
/// writer completes by `done`: a list it finds closed is only one whose writer completed.
/// Returns whether the waiter is ready at once.
fn register_on(
    fanin: &AtomicU32,
    list: &AtomicU64,
    (tag, node): (u32, u32),
    nodes: &[Node],
    done: &AtomicBool,
) -> bool {
    let (now, registered) = register_all(fanin, 1, |_| {
        waitlist::register(list, tag, node, |first| {
            nodes[node as usize].next.store(first, Ordering::Relaxed)
        })
    });
    if registered == 0 {
        assert!(
            done.load(Ordering::Acquire),
            "a closed list's writer completed"
        );
    }
    now
}

/// A join's list: its last hold closes it and hands each node on it to `release`
/// (`retire::release_join`).
fn release_list(fanin: &AtomicU32, list: &AtomicU64, nodes: &[Node], release: impl Fn(u32)) {
    if waitlist::release(fanin) {
        complete_list(list, nodes, release);
    }
}

/// A join whose last hold is gone: closes its list and hands each node on it to `release`
/// (`retire::complete_waitable`).
fn complete_list(list: &AtomicU64, nodes: &[Node], release: impl Fn(u32)) {
    let mut cur = waitlist::close_open(list);
    while cur != NIL {
        let next = nodes[cur as usize].next.load(Ordering::Acquire);
        release(cur);
        cur = next;
    }
}

/// A whole row (row 4) of the one-column table of [`one_column_table`].
fn row_four() -> ptovm_vm::Io {
    use ptovm_vm::{Dir, Io};
    let mut row = Io {
        tensor: 0,
        dir: Dir::In as u8,
        ndims: 1,
        ..Io::default()
    };
    row.ranges[0] = (4, 5);
    row
}

/// Row 4's join and what it needs: the one-column table and its words, the join's list
/// (join 0 of AICPU 0, closed from a last use with tag 8) and fanin, and three waiter nodes
/// (node 0: the join on the writer).
#[derive(Clone)]
struct RowsJoin {
    tables: ptovm_vm::sched::OnceTables,
    words: Arc<Vec<AtomicU64>>,
    list: Arc<AtomicU64>,
    fanin: Arc<AtomicU32>,
    nodes: Arc<[Node; 3]>,
}

impl RowsJoin {
    fn new() -> RowsJoin {
        let (tables, words) = one_column_table(2, 4);
        let list = Arc::new(AtomicU64::new(waitlist::pack(8, NIL)));
        waitlist::close(&list, 8);
        RowsJoin {
            tables,
            words,
            list,
            fanin: Arc::new(AtomicU32::new(0)),
            nodes: nodes::<3>(),
        }
    }

    /// The AICPU that opens the join (tag 9) as `Joins::open` does: the list open, published
    /// as the row's join, registered on the writer (tag 1); then the writer completes
    /// (`done`), its list closed and the join released. The join's last release hands each
    /// node on its list to `on_join`.
    fn open(
        &self,
        done: Arc<AtomicBool>,
        on_join: impl Fn(u32) + Send + 'static,
    ) -> thread::JoinHandle<()> {
        let writer = Arc::new(AtomicU64::new(waitlist::pack(1, NIL)));
        let j = self.clone();
        thread::spawn(move || {
            let release_join = || release_list(&j.fanin, &j.list, &j.nodes[..], &on_join);
            waitlist::open(&j.list, 9);
            let published = ptovm_vm::sched::RowJoin {
                aicpu: 0,
                join: 0,
                tag: 9,
            };
            j.tables.publish_join(&j.words, &row_four(), published);
            // (The writer completes on this thread, after: the registration cannot fail.)
            let (now, _) = register_all(&j.fanin, 1, |_| {
                waitlist::register(&writer, 1, 0, |first| {
                    j.nodes[0].next.store(first, Ordering::Relaxed)
                })
            });
            if now {
                complete_list(&j.list, &j.nodes[..], &on_join);
            }
            done.store(true, Ordering::Release);
            if waitlist::close(&writer, 1) != NIL {
                release_join();
            }
        })
    }

    /// What another AICPU finds in the row's word: the join as published, or nothing yet.
    fn found(&self) -> Option<ptovm_vm::sched::RowJoin> {
        let j = self.tables.row_join(&self.words, &row_four())?;
        assert_eq!((j.aicpu, j.join, j.tag), (0, 0, 9), "the join as published");
        Some(j)
    }
}

/// A row's join (spec/runtime.md §4.7) published for the other AICPUs: the join's AICPU opens
/// the join's list, publishes it as its row's join, registers it on the row's writer, drops
/// its guard and then completes the writer, while another AICPU's task reads the row's join
/// word. That task either finds nothing yet (it would open a join of its own) or finds this
/// join, with its tag, and registers on it (node 1); it becomes ready exactly once, and, if it
/// found the join, only after the writer completed — also when it finds the join already
/// closed. (A writer completing on another thread while the join registers is
/// `a_join_releases_its_task_after_all_its_writers`.)
#[test]
fn a_rows_join_stands_for_its_writers_on_another_aicpu() {
    loom::model(|| {
        let row = RowsJoin::new();
        let task = Waiting::new();
        let opener = {
            let task = task.clone();
            row.open(task.done.clone(), move |node| {
                assert_eq!(node, 1, "only the task waits on the join");
                task.release();
            })
        };
        // The other AICPU's task.
        if let Some(j) = row.found() {
            // (Set before the registration: a release it lets through checks the writer.)
            task.waits.store(true, Ordering::Relaxed);
            task.register_on(&row.list, j.tag, 1, &row.nodes[..]);
        } else {
            // No join yet: it would open its own; here it has nothing to wait for.
            task.became_ready();
        }
        opener.join().unwrap();
        assert_eq!(
            task.ready.load(Ordering::Relaxed),
            1,
            "the task became ready once"
        );
    });
}

/// A relay (spec/runtime.md §4.7): another AICPU finds a row's join by its row word while the
/// join's opener registers it on its writer and the writer completes. It opens a relay — its
/// own join, its list open with its own tag —, registers the relay on the row's join
/// (node 1), and registers its task on the relay (node 2).
/// Whoever drops the relay's last hold (that AICPU, or the writer's completion through the
/// row's join) closes it and releases the task. The task becomes ready exactly once, and, if
/// it registered on the relay or the relay on the join, only after the writer completed.
#[test]
fn a_relay_releases_its_task_after_the_rows_join() {
    loom::model(|| {
        let row = RowsJoin::new();
        // The relay's list, closed from its last use (tag 4), and its fanin.
        let relay = Arc::new(AtomicU64::new(waitlist::pack(4, NIL)));
        waitlist::close(&relay, 4);
        let relay_fanin = Arc::new(AtomicU32::new(0));
        let task = Waiting::new();
        let release_relay = {
            let (relay, relay_fanin, nodes, task) = (
                relay.clone(),
                relay_fanin.clone(),
                row.nodes.clone(),
                task.clone(),
            );
            move |complete: bool| {
                let on_relay = |node| {
                    assert_eq!(node, 2, "only the task waits on the relay");
                    task.release();
                };
                if complete {
                    complete_list(&relay, &nodes[..], on_relay);
                } else {
                    release_list(&relay_fanin, &relay, &nodes[..], on_relay);
                }
            }
        };
        let opener = {
            let release_relay = release_relay.clone();
            row.open(task.done.clone(), move |node| {
                assert_eq!(node, 1, "only the relay waits on the row's join");
                release_relay(false);
            })
        };
        // The other AICPU: `Joins::relay`, then its task's registration on the relay.
        if let Some(j) = row.found() {
            task.waits.store(true, Ordering::Relaxed);
            waitlist::open(&relay, 5);
            let (tag, nodes) = (j.tag, &row.nodes[..]);
            if register_on(&relay_fanin, &row.list, (tag, 1), nodes, &task.done) {
                release_relay(true);
            }
            task.register_on(&relay, 5, 2, &row.nodes[..]);
        } else {
            task.became_ready();
        }
        opener.join().unwrap();
        assert_eq!(
            task.ready.load(Ordering::Relaxed),
            1,
            "the task became ready once"
        );
    });
}
