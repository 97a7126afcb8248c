/* k3/k3_runtime.h - C API of the K3 runtime (libk3runtime.so).
 *
 * Stable C ABI for bindings (Python ctypes). Every function that can fail
 * returns a k3_status; on failure k3_last_error() returns a one-line message
 * (thread-local, valid until the next failing call on the same thread).
 * See docs/runtime.md. */
#ifndef K3_RUNTIME_H
#define K3_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define K3_RUNTIME_API_VERSION 4
#define K3_MAX_RANK 8

typedef enum k3_status {
  K3_OK = 0,
  K3_ERROR_INVALID_ARGUMENT =
      1,           /* bad call: unknown name, wrong shape, out of range... */
  K3_ERROR_IO = 2, /* file cannot be opened/read/written */
  K3_ERROR_FORMAT = 3,    /* malformed .k3bin / safetensors / JSON */
  K3_ERROR_NO_DEVICE = 4, /* requested device/driver not available */
  K3_ERROR_DEVICE = 5,    /* a driver call or kernel failed */
  K3_ERROR_WEIGHTS = 6,   /* missing / mis-shaped / unconvertible weight */
  K3_ERROR_INTERNAL = 7,
  K3_ERROR_OUT_OF_MEMORY = 8 /* the plan does not fit the device's memory */
} k3_status;

/* Same codes as the artifact's dtype field. */
typedef enum k3_dtype {
  K3_DTYPE_BF16 = 0,
  K3_DTYPE_F16 = 1,
  K3_DTYPE_F32 = 2,
  K3_DTYPE_I32 = 3,
  K3_DTYPE_MXFP4 = 4 /* weights only; k3_dtype_size gives 0 */
} k3_dtype;

/* Buffer kinds (artifact BUFS section). */
typedef enum k3_buffer_kind {
  K3_BUFFER_ARENA = 0,
  K3_BUFFER_INPUT = 1,
  K3_BUFFER_OUTPUT = 2,
  K3_BUFFER_STATE = 3
} k3_buffer_kind;
#define K3_BUFFER_FLAG_DUMP 1u

typedef struct k3_artifact k3_artifact;
typedef struct k3_session k3_session;

int k3_runtime_api_version(void);
const char *k3_last_error(void);
const char *k3_status_name(k3_status s);
size_t k3_dtype_size(k3_dtype t);
const char *
k3_dtype_name(k3_dtype t); /* "bf16", "f16", "f32", "i32", "mxfp4" */

/* ---- artifacts -------------------------------------------------------- */
k3_status k3_artifact_open(const char *path, k3_artifact **out);
k3_status k3_artifact_open_memory(const void *data, size_t size,
                                  k3_artifact **out);
void k3_artifact_close(k3_artifact *a); /* sessions keep their own reference */
/* Metadata value for key, or NULL. */
const char *k3_artifact_metadata(const k3_artifact *a, const char *key);
size_t k3_artifact_num_metadata(const k3_artifact *a);
const char *k3_artifact_metadata_key(const k3_artifact *a, size_t i);
size_t k3_artifact_num_entries(const k3_artifact *a);
const char *k3_artifact_entry_name(const k3_artifact *a, size_t i);
size_t k3_artifact_num_weights(const k3_artifact *a);

/* What the artifact needs on its device, from its plan (bytes): checked
 * against the device's free memory before a session allocates anything. */
typedef struct k3_memory_footprint {
  uint64_t weight_bytes;          /* every weight at its dtype */
  uint64_t activation_bytes;      /* the activation arena (max-tokens) */
  uint64_t io_bytes;              /* entry inputs and outputs */
  uint64_t state_bytes;           /* decode state of max-seqs sequences */
  uint64_t state_bytes_per_seq;   /* fixed per sequence (KDA, conv state) */
  uint64_t cache_bytes_per_token; /* MLA latent cache, per token per seq */
  uint64_t total_bytes;
} k3_memory_footprint;
k3_status k3_artifact_memory_footprint(const k3_artifact *a,
                                       k3_memory_footprint *out);
size_t k3_artifact_num_symbols(const k3_artifact *a);
const char *k3_artifact_symbol_name(const k3_artifact *a, size_t i);
int64_t k3_artifact_symbol_max(const k3_artifact *a, size_t i);

typedef struct k3_buffer_info {
  const char *name;
  k3_buffer_kind kind;
  uint64_t size;
  uint64_t per_seq_stride;
  uint32_t device;
  uint32_t flags;
} k3_buffer_info;
size_t k3_artifact_num_buffers(const k3_artifact *a);
k3_status k3_artifact_buffer_info(const k3_artifact *a, size_t id,
                                  k3_buffer_info *out);

/* Description of an entry's input or output (dims evaluated at the symbols'
 * max bounds; `dims` is a readable form such as "num_seqs+1"). */
typedef struct k3_tensor_spec {
  const char *name;
  k3_dtype dtype;
  int32_t rank;
  int64_t max_shape[K3_MAX_RANK];
} k3_tensor_spec;
size_t k3_artifact_entry_num_inputs(const k3_artifact *a, size_t entry);
size_t k3_artifact_entry_num_outputs(const k3_artifact *a, size_t entry);
k3_status k3_artifact_entry_input(const k3_artifact *a, size_t entry, size_t i,
                                  k3_tensor_spec *out);
k3_status k3_artifact_entry_output(const k3_artifact *a, size_t entry, size_t i,
                                   k3_tensor_spec *out);

/* ---- sessions --------------------------------------------------------- */
/* device: "cpu", "cuda" (= cuda:0) or "cuda:N". Loads the kernel objects for
 * the device's target and allocates every plan buffer (zeroed). */
k3_status k3_session_create(const k3_artifact *a, const char *device,
                            k3_session **out);
/* This process's rank of a partitioned artifact in a job started by an MPI
 * launcher (`mpirun -np N`, N the artifact's ranks): device "cpu"; Open
 * MPI's libmpi is loaded at run time (K3_MPI_LIB overrides its name) and
 * initialised unless the process did it. Each process creates its session
 * and makes the same calls; collectives meet through MPI. */
k3_status k3_session_create_mpi(const k3_artifact *a, const char *device,
                                k3_session **out);
void k3_session_destroy(k3_session *s);
const char *k3_session_device_name(const k3_session *s);
/* The session's rank (0 unless partitioned and made by _create_mpi). */
uint32_t k3_session_rank(const k3_session *s);

/* Each path is a .safetensors file, a sharded index (*.json with a
 * weight_map), or a checkpoint directory (its model.safetensors.index.json,
 * else every *.safetensors in it). Every manifest weight must be found with the
 * manifest's shape; float dtypes are converted to the manifest dtype. */
k3_status k3_session_load_weights(k3_session *s, const char *const *paths,
                                  size_t num_paths);
/* Progress of the following k3_session_load_weights calls: fn(user, bytes
 * done, bytes in all), called on the loading thread at most about ten
 * times a second and once at the end (done == total); NULL: none. */
typedef void (*k3_progress_fn)(void *user, uint64_t done, uint64_t total);
void k3_session_set_load_progress(k3_session *s, k3_progress_fn fn, void *user);
/* The last successful k3_session_load_weights: bytes written to the device
 * (the weights at the manifest's dtypes), safetensors files they were read
 * from, wall seconds from opening the files to the last copy done. Zeros
 * before one. */
typedef struct k3_load_stats {
  uint64_t bytes;
  uint64_t files;
  double seconds;
} k3_load_stats;
void k3_session_load_stats(const k3_session *s, k3_load_stats *out);
/* One weight from host memory: `bytes` bytes in the manifest's dtype and
 * layout (mxfp4: its codes [.., in / 2] then its scales [.., in / 32], as
 * the checkpoint's weight_packed and weight_scale); the size must match. */
k3_status k3_session_set_weight(k3_session *s, const char *name,
                                const void *data, size_t bytes);
/* Deterministic init from each weight's recipe (docs/runtime.md): made by
 * the artifact's weight-init kernels on a GPU, on host threads on the CPU
 * (K3_RANDOM_WEIGHTS=host|device chooses); the same values either way. */
k3_status k3_session_init_random_weights(k3_session *s, uint64_t seed);
/* Where the last k3_session_init_random_weights made them: "device
 * kernels", "host threads", or both joined by " and "; "" before. */
const char *k3_session_random_weights_place(const k3_session *s);
/* Zeroes persistent state: one sequence slot, or all when slot < 0. */
k3_status k3_session_reset_state(k3_session *s, int64_t slot);

typedef struct k3_symbol_value {
  const char *name;
  int64_t value;
} k3_symbol_value;

typedef struct k3_host_tensor {
  const char *name;
  k3_dtype dtype;
  int32_t rank;
  const int64_t *shape;
  const void *data;
  size_t nbytes;
} k3_host_tensor;

/* Runs an entry point: checks symbols against their bounds and inputs
 * against their dtypes/shapes, uploads inputs, executes the launches in
 * order, waits, and downloads the outputs. */
/* Milliseconds the last k3_session_run spent in its launches (first launch
 * to device idle; input uploads and output downloads excluded). */
double k3_session_last_launch_ms(const k3_session *s);
/* Launch graphs: a run that repeats the previous run's entry and symbol
 * values (a decode loop) is captured into a graph once (on CUDA a CUDA
 * graph, on the CPU the list of launches with their arguments) and replayed
 * from then on; K3_LAUNCH_GRAPHS=0 in the environment turns this off. Counts
 * of graphs captured and of runs replayed from one. */
void k3_session_graph_stats(const k3_session *s, size_t *captured,
                            size_t *replayed);
/* The lanes of the last graph captured: K3_LAUNCH_LANES=n (read at session
 * creation; default 1) lets a graph run launches that touch no common
 * written bytes side by side, on up to n lanes (CUDA: streams of the
 * capture, branches of the graph). Lanes used (1: in order) and the waits
 * between them. */
void k3_session_graph_lanes(const k3_session *s, size_t *lanes, size_t *waits);
k3_status k3_session_run(k3_session *s, const char *entry,
                         const k3_symbol_value *symbols, size_t num_symbols,
                         const k3_host_tensor *inputs, size_t num_inputs);

/* Outputs of the last successful run; data stays valid until the next run
 * or k3_session_destroy. */
typedef struct k3_tensor_view {
  const char *name;
  k3_dtype dtype;
  int32_t rank;
  int64_t shape[K3_MAX_RANK];
  const void *data;
  size_t nbytes;
} k3_tensor_view;
size_t k3_session_num_outputs(const k3_session *s);
k3_status k3_session_output(const k3_session *s, size_t i, k3_tensor_view *out);
k3_status k3_session_find_output(const k3_session *s, const char *name,
                                 k3_tensor_view *out);

/* ---- device tensors (DLPack; docs/runtime.md, "Device tensors") ------- */
/* An input already on the session's device: `data` is a device address
 * (CUdeviceptr on CUDA, a host address on the CPU), contiguous, row-major.
 * k3_session_run_device copies each into the plan's input buffer device to
 * device (no host copy; token_ids and inputs with a value bound are also
 * read back to check them), runs, and leaves the outputs on the device: read
 * them with k3_session_output_device (valid until the next run). The caller
 * orders its own work before the call (e.g. synchronizes its stream). */
typedef struct k3_device_tensor {
  const char *name;
  k3_dtype dtype;
  int32_t rank;
  const int64_t *shape;
  uint64_t data;
  size_t nbytes;
} k3_device_tensor;
k3_status k3_session_run_device(k3_session *s, const char *entry,
                                const k3_symbol_value *symbols,
                                size_t num_symbols,
                                const k3_device_tensor *inputs,
                                size_t num_inputs);
typedef struct k3_device_view {
  const char *name;
  k3_dtype dtype;
  int32_t rank;
  int64_t shape[K3_MAX_RANK];
  uint64_t data; /* device address of the session's output buffer */
  size_t nbytes;
  int32_t device_type; /* DLPack's DLDeviceType: 1 = kDLCPU, 2 = kDLCUDA */
  int32_t device_id;
} k3_device_view;
k3_status k3_session_output_device(k3_session *s, const char *name,
                                   k3_device_view *out);

/* Downloads the outputs of the last run when it left them on the device (a
 * generation step samples from the logits rows it needs only); afterwards
 * k3_session_output/find_output see them. */
k3_status k3_session_fetch_outputs(k3_session *s);

/* Copies the raw bytes of a plan buffer (e.g. persistent state) to host. */
k3_status k3_session_read_buffer(k3_session *s, size_t buffer_id, void *dst,
                                 size_t nbytes);

/* ---- profiling and timing (docs/runtime.md, "Profiling and timing") -- */
/* Profiling: while on, each kernel launch is timed between two marks (a pair
 * of CUDA events on CUDA, resolved when the run ends; the host's steady
 * clock around the kernel call on the CPU) and aggregated per entry and
 * kernel. Launch graphs are neither captured nor replayed while profiling
 * (every launch needs its own events), so decode steps run launch by launch.
 * Turning profiling on starts an empty profile. */
k3_status k3_session_set_profiling(k3_session *s, int enabled);
k3_status k3_session_reset_profile(k3_session *s);
/* What the marks are: "CUDA events" or "host steady_clock". */
const char *k3_session_clock_name(const k3_session *s);

typedef struct k3_kernel_profile {
  const char *entry;  /* entry point the launches belong to */
  const char *kernel; /* kernel symbol */
  uint64_t calls;     /* launches (empty grids are not launched) */
  uint64_t runs;      /* profiled runs of the entry */
  double total_ms, min_ms, max_ms;
  double share; /* total_ms over the sum of the queried selection, in [0, 1] */
  int64_t grid[3], block[3]; /* of the first launch */
  int32_t dims_varied;       /* 1: a later launch had another grid or block */
} k3_kernel_profile;
/* Takes a snapshot of the profile of `entry` (NULL or "": every entry),
 * sorted by total time, descending, and returns its number of kernels;
 * k3_session_profile_kernel reads row i of the snapshot (strings valid until
 * the next snapshot or k3_session_destroy). */
size_t k3_session_profile_snapshot(k3_session *s, const char *entry);
k3_status k3_session_profile_kernel(const k3_session *s, size_t i,
                                    k3_kernel_profile *out);

/* Benchmark timing: runs `entry` warmup + reps times (as k3_session_run,
 * outputs left on the device) and writes the time of each of the last
 * `reps` runs to ms[0..reps): marks around the launches of the whole entry
 * (device time between two CUDA events on CUDA; the host clock on the CPU);
 * input copies are outside the marks. Launch graphs apply as in any run
 * (K3_LAUNCH_GRAPHS=0 times launch by launch). */
k3_status k3_session_time(k3_session *s, const char *entry,
                          const k3_symbol_value *symbols, size_t num_symbols,
                          const k3_host_tensor *inputs, size_t num_inputs,
                          int32_t warmup, int32_t reps, double *ms);
/* The same with inputs on the device (as k3_session_run_device). */
k3_status k3_session_time_device(k3_session *s, const char *entry,
                                 const k3_symbol_value *symbols,
                                 size_t num_symbols,
                                 const k3_device_tensor *inputs,
                                 size_t num_inputs, int32_t warmup,
                                 int32_t reps, double *ms);

/* ---- sampling and generation (docs/runtime.md, "Sampling") ----------- */
/* Per-sequence sampling settings. k3_sampling_params_init gives greedy
 * decoding (temperature 0: argmax, the lowest id among equal maxima) with
 * every filter off. The random number for step t of a sequence is
 * Philox4x32-10 keyed by `seed` at counter (t, stream): it depends on
 * nothing else in the batch. */
typedef struct k3_sampling_params {
  float temperature;        /* 0: greedy */
  int32_t top_k;            /* 0: off */
  float top_p;              /* 1: off; in (0, 1] */
  float min_p;              /* 0: off; in [0, 1] */
  float repetition_penalty; /* 1: off; > 0 (prompt and generated ids) */
  uint64_t seed;
  uint64_t stream; /* RNG stream, e.g. the sequence's index */
} k3_sampling_params;
void k3_sampling_params_init(k3_sampling_params *p);

/* Samples one token from a row of float logits; `history` (prompt and
 * generated ids) feeds the repetition penalty; `step` is the index of the
 * token in the sequence's output (the RNG counter). */
k3_status k3_sample(const float *logits, int64_t vocab,
                    const k3_sampling_params *p, const int32_t *history,
                    size_t num_history, uint64_t step, int32_t *token);

/* One sequence of a generation. */
typedef struct k3_sequence_request {
  const int32_t *prompt;
  size_t prompt_len;
  int64_t max_new_tokens;
  k3_sampling_params sampling;
  const int32_t *stop_tokens; /* EOS and other stop ids: the sequence ends
                                 after emitting one of them */
  size_t num_stop_tokens;
} k3_sequence_request;

typedef enum k3_finish_reason {
  K3_FINISH_NONE = 0,   /* still generating */
  K3_FINISH_LENGTH = 1, /* max_new_tokens reached */
  K3_FINISH_STOP_TOKEN = 2,
  K3_FINISH_CALLER = 3 /* k3_generation_stop (e.g. a stop string) */
} k3_finish_reason;

/* A generation over a session: up to max_seqs prompts of different lengths,
 * each in its own state slot (sequence i in slot i) with its own sampling
 * settings. The session's state is reset when it starts; the session must
 * outlive it and must not run anything else meanwhile. `entry` is the
 * prefill entry (NULL: "forward"); decode steps go through "<entry>_decode"
 * when the artifact has it. The requests' arrays are copied. */
typedef struct k3_generation k3_generation;
k3_status k3_generation_start(k3_session *s, const char *entry,
                              const k3_sequence_request *requests,
                              size_t num_requests, k3_generation **out);
/* One step: the packed prefill of every prompt on the first call, then one
 * decode step of all sequences. tokens[i] (num_requests entries) receives
 * sequence i's new token, or -1 when it had already finished; *active the
 * number of sequences still generating afterwards (0: done, further steps
 * do nothing). */
k3_status k3_generation_step(k3_generation *g, int32_t *tokens, size_t *active);
/* Ends sequence i now (finish reason K3_FINISH_CALLER). */
k3_status k3_generation_stop(k3_generation *g, size_t i);
k3_finish_reason k3_generation_finish_reason(const k3_generation *g, size_t i);
/* Milliseconds spent in the session runs of the prefill / of all decode
 * steps so far, and the number of decode steps. */
void k3_generation_timing(const k3_generation *g, double *prefill_ms,
                          double *decode_ms, size_t *decode_steps);
void k3_generation_destroy(k3_generation *g);

#ifdef __cplusplus
}
#endif

#endif /* K3_RUNTIME_H */
