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

#define K3_RUNTIME_API_VERSION 1
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
  K3_ERROR_INTERNAL = 7
} k3_status;

/* Same codes as the artifact's dtype field. */
typedef enum k3_dtype {
  K3_DTYPE_BF16 = 0,
  K3_DTYPE_F16 = 1,
  K3_DTYPE_F32 = 2,
  K3_DTYPE_I32 = 3
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
const char *k3_dtype_name(k3_dtype t); /* "bf16", "f16", "f32", "i32" */

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
void k3_session_destroy(k3_session *s);
const char *k3_session_device_name(const k3_session *s);

/* Each path is a .safetensors file or a sharded index (*.json with a
 * weight_map). Every manifest weight must be found with the manifest's
 * shape; float dtypes are converted to the manifest dtype. */
k3_status k3_session_load_weights(k3_session *s, const char *const *paths,
                                  size_t num_paths);
/* Deterministic init from each weight's recipe (docs/runtime.md). */
k3_status k3_session_init_random_weights(k3_session *s, uint64_t seed);
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

/* Copies the raw bytes of a plan buffer (e.g. persistent state) to host. */
k3_status k3_session_read_buffer(k3_session *s, size_t buffer_id, void *dst,
                                 size_t nbytes);

#ifdef __cplusplus
}
#endif

#endif /* K3_RUNTIME_H */
