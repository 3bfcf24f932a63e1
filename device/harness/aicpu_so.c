/* A host for libptovm_aicpu.so, as an AICPU kernel launcher would use it: loads the shared
   object with dlopen, resolves its entry points by name, lays out a launch, starts the AICPU
   threads on ptovm_aicpu_exec (one more than the launch's AICPU count: the surplus returns at
   once) and one thread per AICore, whose cores run real f32 kernels — element-wise add and
   matrix multiplication — on the regions their task descriptors give. Every tensor of the
   program is an f32 array in this process's memory, bound at launch and filled with
   fill(tensor, index) below; at the end all tensors are written to OUT, back to back, for
   tests/tests/qemu.rs to compare with the same kernels run on the host.

   usage: aicpu_so LIB.so FILE.ptow OUT AICPUS WINDOW CUBE VECTOR KERNELS TENSORS [PARAM]...
     KERNELS  the C kernel of each kernel index of the program, comma-separated: add | matmul
     TENSORS  each tensor's element count (f32), comma-separated, in the program's order
     PARAM    s:VALUE (scalar) or a:V1,V2,... (array), in slot order
   Prints "ok: N tasks" on success; on a refused or failed launch (a kernel that finds its
   regions wrong reports it with ptovm_core_fail), the launch's error code and message, and
   exits 1. Built by scripts/aicpu-so.sh; run under qemu-aarch64. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptovm.h"

#define MAX_ITEMS 64

typedef int32_t (*entry_fn)(void *);
typedef int32_t (*layout_fn)(const uint8_t *, size_t, const ptovm_launch *, ptovm_sizes *,
                             uint8_t *, size_t);
typedef int32_t (*take_fn)(const void *, uint32_t, ptovm_task *);
typedef int32_t (*descriptor_fn)(const void *, uint32_t, ptovm_desc *);
typedef int32_t (*core_fn)(const void *, uint32_t);
typedef int32_t (*shutdown_fn)(const void *);
typedef int32_t (*fail_fn)(const void *, uint32_t, int32_t);
typedef uint32_t (*version_fn)(void);

static struct {
  entry_fn init, exec;
  layout_fn layout;
  take_fn take;
  descriptor_fn descriptor;
  core_fn finish, stopping;
  shutdown_fn shutdown_;
  fail_fn fail;
  version_fn version;
} so;

enum kernel { K_ADD, K_MATMUL };

static ptovm_kernel_args *args;
static enum kernel kernels[MAX_ITEMS];
static uint32_t nkernels;
static atomic_uint_fast64_t tasks_run;

static void die(const char *what, const char *msg) {
  fprintf(stderr, "aicpu_so: %s: %s\n", what, msg);
  exit(1);
}

static void *resolve(void *lib, const char *name) {
  void *f = dlsym(lib, name);
  if (!f) die("dlsym", name);
  return f;
}

/* An exact binary fraction in [-1.375, 1.375]: the same on the host and here. */
static float fill(uint32_t tensor, uint64_t i) {
  return (float)((i * 7 + tensor * 13) % 23) * 0.125f - 1.375f;
}

/* Element k (row-major over the region's extents) of a region of f32. */
static float *elem(const ptovm_region *r, uint64_t k) {
  int64_t off = 0;
  for (int d = r->rank - 1; d >= 0; d--) {
    uint64_t e = r->extent[d] ? r->extent[d] : 1;
    off += (int64_t)(k % e) * r->stride[d];
    k /= e;
  }
  return (float *)(uintptr_t)r->addr + off;
}

static uint64_t count(const ptovm_region *r) {
  uint64_t n = r->rank ? 1 : 0;
  for (int d = 0; d < r->rank; d++) n *= r->extent[d];
  return n;
}

/* A region as a matrix: rows are all extents but the last, columns the last. */
static void matrix(const ptovm_region *r, uint64_t *rows, uint64_t *cols) {
  *cols = r->rank ? r->extent[r->rank - 1] : 0;
  *rows = *cols ? count(r) / *cols : 0;
}

/* The kernels return 0, or a code of their own when the task's regions are not what they
   compute on; the core then reports the failure (ptovm_core_fail) instead of finishing. */
enum { BAD_REGIONS = 1, BAD_SHAPES = 2 };

static int f32_regions(const ptovm_desc *d, int n) {
  if (d->nregions != n) return 0;
  for (int i = 0; i < n; i++)
    if (d->regions[i].dtype != 3 /* f32 */ || d->regions[i].addr == 0) return 0;
  return 1;
}

/* z = x + y */
static int add(const ptovm_desc *d) {
  if (!f32_regions(d, 3)) return BAD_REGIONS;
  const ptovm_region *x = &d->regions[0], *y = &d->regions[1], *z = &d->regions[2];
  uint64_t n = count(z);
  if (count(x) != n || count(y) != n) return BAD_SHAPES;
  for (uint64_t k = 0; k < n; k++) *elem(z, k) = *elem(x, k) + *elem(y, k);
  return 0;
}

/* y = x · w, each sum in order of p from 0.0f (as the host's kernel library does). */
static int matmul(const ptovm_desc *d) {
  if (!f32_regions(d, 3)) return BAD_REGIONS;
  const ptovm_region *x = &d->regions[0], *w = &d->regions[1], *y = &d->regions[2];
  uint64_t m, k, k2, n, m2, n2;
  matrix(x, &m, &k);
  matrix(w, &k2, &n);
  matrix(y, &m2, &n2);
  if (k != k2 || m != m2 || n != n2) return BAD_SHAPES;
  for (uint64_t i = 0; i < m; i++)
    for (uint64_t j = 0; j < n; j++) {
      float s = 0.0f;
      for (uint64_t p = 0; p < k; p++) s += *elem(x, i * k + p) * *elem(w, p * n + j);
      *elem(y, i * n + j) = s;
    }
  return 0;
}

static void *aicpu_thread(void *arg) {
  (void)arg;
  intptr_t rc = so.exec(args);
  return (void *)rc;
}

static void *core_thread(void *arg) {
  uint32_t core = (uint32_t)(uintptr_t)arg;
  ptovm_task t;
  ptovm_desc d;
  for (;;) {
    int32_t got = so.take(args->shared, core, &t);
    if (got < 0) die("ptovm_core_take", "failed");
    if (got == 1) {
      if (so.descriptor(args->shared, core, &d) != 1) die("ptovm_core_descriptor", "no descriptor");
      if (d.kernel >= nkernels) die("kernel", "no C kernel for this kernel index");
      int rc = kernels[d.kernel] == K_ADD ? add(&d) : matmul(&d);
      if (rc != 0) {
        if (so.fail(args->shared, core, rc) != 0) die("ptovm_core_fail", "refused");
        /* The launch fails; the task stays unfinished: wait for the shutdown. */
        while (so.stopping(args->shared, core) != 1) sched_yield();
        return NULL;
      }
      atomic_fetch_add(&tasks_run, 1);
      so.finish(args->shared, core);
    } else if (so.stopping(args->shared, core) == 1) {
      return NULL;
    }
  }
}

static uint32_t split(char *s, char **items) {
  uint32_t n = 0;
  for (char *tok = strtok(s, ","); tok && n < MAX_ITEMS; tok = strtok(NULL, ",")) items[n++] = tok;
  return n;
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) die("open", path);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = aligned_alloc(64, (*len + 63) / 64 * 64);
  if (!b || fread(b, 1, *len, f) != *len) die("read", path);
  fclose(f);
  return b;
}

int main(int argc, char **argv) {
  if (argc < 10)
    die("usage", "aicpu_so LIB.so FILE.ptow OUT AICPUS WINDOW CUBE VECTOR KERNELS TENSORS [PARAM]...");
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) die("dlopen", dlerror());
  so.init = (entry_fn)resolve(lib, "ptovm_aicpu_init");
  so.exec = (entry_fn)resolve(lib, "ptovm_aicpu_exec");
  so.layout = (layout_fn)resolve(lib, "ptovm_layout");
  so.take = (take_fn)resolve(lib, "ptovm_core_take");
  so.descriptor = (descriptor_fn)resolve(lib, "ptovm_core_descriptor");
  so.finish = (core_fn)resolve(lib, "ptovm_core_finish");
  so.stopping = (core_fn)resolve(lib, "ptovm_core_stopping");
  so.shutdown_ = (shutdown_fn)resolve(lib, "ptovm_shutdown");
  so.fail = (fail_fn)resolve(lib, "ptovm_core_fail");
  so.version = (version_fn)resolve(lib, "ptovm_abi_version");
  if (so.version() != PTOVM_ABI_VERSION) die("ptovm_abi_version", "not this header's");

  size_t code_len;
  uint8_t *code = read_file(argv[2], &code_len);
  ptovm_launch launch = {(uint32_t)atoi(argv[4]), (uint32_t)atoi(argv[5]),
                         (uint32_t)atoi(argv[6]), (uint32_t)atoi(argv[7]), -1, 0, 0, 0, 0};
  char *items[MAX_ITEMS];
  nkernels = split(argv[8], items);
  for (uint32_t i = 0; i < nkernels; i++) {
    if (strcmp(items[i], "add") == 0) kernels[i] = K_ADD;
    else if (strcmp(items[i], "matmul") == 0) kernels[i] = K_MATMUL;
    else die("kernel", items[i]);
  }
  uint32_t ntensors = split(argv[9], items);
  ptovm_tensor tensors[MAX_ITEMS];
  float *data[MAX_ITEMS];
  uint64_t elems[MAX_ITEMS];
  memset(tensors, 0, sizeof tensors);
  for (uint32_t t = 0; t < ntensors; t++) {
    elems[t] = strtoull(items[t], NULL, 10);
    data[t] = aligned_alloc(64, (elems[t] * 4 + 63) / 64 * 64 + 64);
    if (!data[t]) die("memory", "tensor");
    for (uint64_t i = 0; i < elems[t]; i++) data[t][i] = fill(t, i);
    tensors[t].base = (uint64_t)(uintptr_t)data[t];
    tensors[t].bytes = elems[t] * 4;
    tensors[t].dtype = 3; /* f32 */
  }
  int nparams = argc - 10;
  ptovm_param params[MAX_ITEMS];
  for (int i = 0; i < nparams && i < MAX_ITEMS; i++) {
    const char *p = argv[10 + i];
    memset(&params[i], 0, sizeof params[i]);
    if (strncmp(p, "s:", 2) == 0) {
      params[i].value = (uint32_t)strtoul(p + 2, NULL, 10);
    } else if (strncmp(p, "a:", 2) == 0) {
      uint32_t *a = malloc(sizeof(uint32_t) * MAX_ITEMS);
      char *copy = strdup(p + 2);
      char *vals[MAX_ITEMS];
      uint32_t n = split(copy, vals);
      for (uint32_t j = 0; j < n; j++) a[j] = (uint32_t)strtoul(vals[j], NULL, 10);
      params[i].kind = 1;
      params[i].data = a;
      params[i].len = n;
    } else {
      die("parameter", p);
    }
  }

  ptovm_sizes sizes;
  uint8_t err[256];
  if (so.layout(code, code_len, &launch, &sizes, err, sizeof err) != 0) die("ptovm_layout", (char *)err);
  args = aligned_alloc(128, (sizeof *args + 127) / 128 * 128);
  memset(args, 0, sizeof *args);
  args->code = code;
  args->code_len = code_len;
  args->params = params;
  args->nparams = (uint32_t)nparams;
  args->tensors = tensors;
  args->ntensors = ntensors;
  args->launch = launch;
  args->shared_bytes = (sizes.shared_bytes + 127) / 128 * 128;
  args->shared = aligned_alloc(128, args->shared_bytes);
  args->instance_bytes = (sizes.instance_bytes + 127) / 128 * 128;
  args->instances = aligned_alloc(128, args->instance_bytes * sizes.aicpus);
  if (!args->shared || !args->instances) die("memory", "regions");
  if (so.init(args) != 0) {
    fprintf(stderr, "aicpu_so: launch refused: %d: %s\n", args->status, (char *)args->message);
    return 1;
  }

  uint32_t cores = sizes.cores, aicpus = sizes.aicpus + 1;
  pthread_t *ct = malloc(sizeof(pthread_t) * cores), *at = malloc(sizeof(pthread_t) * aicpus);
  for (uint32_t c = 0; c < cores; c++) pthread_create(&ct[c], NULL, core_thread, (void *)(uintptr_t)c);
  for (uint32_t a = 0; a < aicpus; a++) pthread_create(&at[a], NULL, aicpu_thread, NULL);
  int failed = 0;
  for (uint32_t a = 0; a < aicpus; a++) {
    void *rc;
    pthread_join(at[a], &rc);
    failed |= rc != NULL;
  }
  so.shutdown_(args->shared);
  for (uint32_t c = 0; c < cores; c++) pthread_join(ct[c], NULL);
  if (failed || args->status != 0) {
    fprintf(stderr, "aicpu_so: launch failed: %d: %s\n", args->status, (char *)args->message);
    return 1;
  }
  FILE *out = fopen(argv[3], "wb");
  if (!out) die("open", argv[3]);
  for (uint32_t t = 0; t < ntensors; t++)
    if (fwrite(data[t], 4, elems[t], out) != elems[t]) die("write", argv[3]);
  fclose(out);
  printf("ok: %llu tasks\n", (unsigned long long)atomic_load(&tasks_run));
  return 0;
}
