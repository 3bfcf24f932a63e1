/* The AICPU kernel host, in C, for libptovm_device: loads a .ptow file and its runtime
   parameters, lays out the shared region, starts one thread per AICPU (each building its
   instance and stepping it) and one thread per AICore (polling its handshake slot and "running"
   each task by logging it), and prints the log:

     task ID aicpu A pool P core C start S end E desc k=KERNEL/POOL p=P,... r=REGION|...

   where S and E are ticks of one global counter and the desc words are the task's descriptor
   as ptovm_core_descriptor gives it, each region tensor:dir:rank:dtype:offset:addr:e,...:s,...
   (the form of tests/src/desc.rs, which checks it). Exit status 0 when every AICPU finished.

   Usage: harness FILE.ptow AICPUS WINDOW CUBE VECTOR [PARAM ...]
   PARAM is s:VALUE for a scalar slot or a:V1,V2,... (a: for an empty array), in slot order. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptovm.h"

static void *shared;
static size_t instance_bytes;
static const ptovm_param *params;
static uint32_t nparams;
static atomic_uint_fast64_t ticks = 1;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char *log_buf;
static size_t log_len, log_cap;

static void die(const char *what, const char *msg) {
  fprintf(stderr, "harness: %s: %s\n", what, msg);
  exit(2);
}

static void log_line(const char *line) {
  pthread_mutex_lock(&log_lock);
  size_t n = strlen(line);
  if (log_len + n + 1 > log_cap) {
    log_cap = (log_cap + n + 1) * 2;
    log_buf = realloc(log_buf, log_cap);
    if (!log_buf) die("log", "out of memory");
  }
  memcpy(log_buf + log_len, line, n);
  log_len += n;
  pthread_mutex_unlock(&log_lock);
}

typedef struct {
  uint32_t aicpu;
  int32_t result;
  char err[256];
} aicpu_arg;

static void *aicpu_main(void *p) {
  aicpu_arg *a = p;
  void *inst = NULL;
  if (posix_memalign(&inst, PTOVM_ALIGN, instance_bytes) != 0) die("instance", "out of memory");
  a->result = ptovm_instance_init(inst, instance_bytes, shared, params, nparams, NULL, 0, a->aicpu,
                                  (uint8_t *)a->err, sizeof a->err);
  if (a->result != PTOVM_OK) return NULL;
  /* The kernel's own loop: step, and give the CPU away while there is nothing to do (the
     harness runs many threads on few host cores). */
  for (;;) {
    int32_t r = ptovm_step(inst);
    if (r == PTOVM_PROGRESS) continue;
    if (r == PTOVM_OK) {
      sched_yield();
      continue;
    }
    a->result = r;
    if (r != PTOVM_FINISHED) ptovm_error(inst, (uint8_t *)a->err, sizeof a->err);
    ptovm_counters c;
    if (ptovm_read_counters(inst, &c) == PTOVM_OK && r == PTOVM_FINISHED && c.tasks != c.emitted) {
      snprintf(a->err, sizeof a->err, "AICPU %u: %llu tasks completed of %llu emitted", a->aicpu,
               (unsigned long long)c.tasks, (unsigned long long)c.emitted);
      a->result = PTOVM_E_STATE;
    }
    return NULL;
  }
}

static void *core_main(void *p) {
  uint32_t core = (uint32_t)(uintptr_t)p;
  for (;;) {
    ptovm_task t;
    int32_t r = ptovm_core_take(shared, core, &t);
    if (r == 1) {
      uint64_t start = atomic_fetch_add(&ticks, 1);
      /* The kernel: nothing but this record, and its descriptor. */
      ptovm_desc d;
      if (ptovm_core_descriptor(shared, core, &d) != 1) die("core", "no descriptor");
      if (d.id != t.id || d.kernel != t.kernel || d.pool != t.pool)
        die("core", "the descriptor is not the task's");
      uint64_t end = atomic_fetch_add(&ticks, 1);
      char line[8192];
      int n = snprintf(line, sizeof line,
                       "task %llu aicpu %u pool %u core %u start %llu end %llu desc k=%u/%u p=",
                       (unsigned long long)t.id, t.aicpu, t.pool, core,
                       (unsigned long long)start, (unsigned long long)end, d.kernel, d.pool);
      for (unsigned i = 0; i < d.nparams; i++)
        n += snprintf(line + n, sizeof line - n, "%s%lld", i ? "," : "", (long long)d.params[i]);
      n += snprintf(line + n, sizeof line - n, " r=");
      for (unsigned i = 0; i < d.nregions; i++) {
        const ptovm_region *r = &d.regions[i];
        n += snprintf(line + n, sizeof line - n, "%s%u:%u:%u:%u:%lld:%llu:", i ? "|" : "",
                      r->tensor, r->dir, r->rank, r->dtype, (long long)r->offset,
                      (unsigned long long)r->addr);
        for (unsigned k = 0; k < r->rank; k++)
          n += snprintf(line + n, sizeof line - n, "%s%u", k ? "," : "", r->extent[k]);
        n += snprintf(line + n, sizeof line - n, ":");
        for (unsigned k = 0; k < r->rank; k++)
          n += snprintf(line + n, sizeof line - n, "%s%lld", k ? "," : "", (long long)r->stride[k]);
      }
      snprintf(line + n, sizeof line - n, "\n");
      log_line(line);
      if (ptovm_core_finish(shared, core) != PTOVM_OK) die("core", "finish failed");
    } else if (r < 0) {
      die("core", "take failed");
    } else if (ptovm_core_stopping(shared, core) == 1) {
      return NULL;
    } else {
      sched_yield();
    }
  }
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) die(path, "cannot open");
  uint8_t *buf = NULL;
  size_t cap = 0;
  *len = 0;
  for (;;) {
    if (*len == cap) {
      cap = cap ? cap * 2 : 4096;
      buf = realloc(buf, cap);
      if (!buf) die(path, "out of memory");
    }
    size_t n = fread(buf + *len, 1, cap - *len, f);
    if (n == 0) break;
    *len += n;
  }
  fclose(f);
  return buf;
}

static ptovm_param parse_param(const char *s) {
  ptovm_param p = {0, 0, NULL, 0};
  if (strncmp(s, "s:", 2) == 0) {
    p.kind = 0;
    p.value = (uint32_t)strtoul(s + 2, NULL, 10);
  } else if (strncmp(s, "a:", 2) == 0) {
    p.kind = 1;
    const char *v = s + 2;
    uint32_t n = *v ? 1 : 0;
    for (const char *c = v; *c; c++) n += *c == ',';
    uint32_t *data = calloc(n ? n : 1, sizeof *data);
    if (!data) die("parameter", "out of memory");
    for (uint32_t i = 0; i < n; i++) {
      char *end;
      data[i] = (uint32_t)strtoul(v, &end, 10);
      v = *end == ',' ? end + 1 : end;
    }
    p.data = data;
    p.len = n;
  } else {
    die("parameter", s);
  }
  return p;
}

int main(int argc, char **argv) {
  if (argc < 6) die("usage", "harness FILE.ptow AICPUS WINDOW CUBE VECTOR [s:V | a:V,V,...]...");
  if (ptovm_abi_version() != PTOVM_ABI_VERSION) die("abi", "library and header differ");
  size_t len;
  uint8_t *code = read_file(argv[1], &len);
  ptovm_launch launch = {(uint32_t)atoi(argv[2]), (uint32_t)atoi(argv[3]), (uint32_t)atoi(argv[4]),
                         (uint32_t)atoi(argv[5]), -1, 0, 0, 0, 0};
  nparams = (uint32_t)(argc - 6);
  ptovm_param *ps = calloc(nparams ? nparams : 1, sizeof *ps);
  for (uint32_t i = 0; i < nparams; i++) ps[i] = parse_param(argv[6 + i]);
  params = ps;

  char err[256];
  /* What a kernel does first: hold the program's work bound against its budget. */
  ptovm_work work;
  if (ptovm_work_bound(code, len, ps, nparams, &work, (uint8_t *)err, sizeof err) != PTOVM_OK)
    die("work bound", err);
  fprintf(stderr, "harness: work bound: %llu loop iterations, %llu tasks\n",
          (unsigned long long)work.iterations, (unsigned long long)work.tasks);
  ptovm_sizes sizes;
  if (ptovm_layout(code, len, &launch, &sizes, (uint8_t *)err, sizeof err) != PTOVM_OK)
    die("layout", err);
  if (posix_memalign(&shared, PTOVM_ALIGN, sizes.shared_bytes) != 0) die("shared", "out of memory");
  if (ptovm_shared_init(shared, sizes.shared_bytes, code, len, &launch, (uint8_t *)err,
                        sizeof err) != PTOVM_OK)
    die("shared init", err);
  instance_bytes = sizes.instance_bytes;

  pthread_t *cores = calloc(sizes.cores, sizeof *cores);
  for (uint32_t c = 0; c < sizes.cores; c++)
    if (pthread_create(&cores[c], NULL, core_main, (void *)(uintptr_t)c) != 0) die("core", "thread");
  aicpu_arg *args = calloc(sizes.aicpus, sizeof *args);
  pthread_t *aicpus = calloc(sizes.aicpus, sizeof *aicpus);
  for (uint32_t a = 0; a < sizes.aicpus; a++) {
    args[a].aicpu = a;
    if (pthread_create(&aicpus[a], NULL, aicpu_main, &args[a]) != 0) die("aicpu", "thread");
  }
  int failed = 0;
  for (uint32_t a = 0; a < sizes.aicpus; a++) {
    pthread_join(aicpus[a], NULL);
    if (args[a].result != PTOVM_FINISHED) {
      fprintf(stderr, "harness: AICPU %u: %d: %s\n", a, args[a].result, args[a].err);
      failed = 1;
    }
  }
  ptovm_shutdown(shared);
  for (uint32_t c = 0; c < sizes.cores; c++) pthread_join(cores[c], NULL);
  fwrite(log_buf, 1, log_len, stdout);
  if (ptovm_panicked()) {
    fprintf(stderr, "harness: ptovm panicked\n");
    failed = 1;
  }
  return failed;
}
