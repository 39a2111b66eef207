/* braid's C API: join a group, run collectives, drive the bucketed reducer.
 *
 * Plain C (C99), no C++ or Abseil types: any language that can load a shared
 * library (libbraid.so) can use it. The Python package and the torch backend
 * are built on it, so a process holds one braid runtime however it is used.
 *
 *   braid_group* group;
 *   if (braid_group_create(NULL, &group) != BRAID_OK) {   // from the worker environment
 *     fprintf(stderr, "%s\n", braid_last_error());
 *   }
 *   braid_buffer grads = {data, count, BRAID_FLOAT32, {BRAID_CPU, 0}};
 *   braid_work* work;
 *   braid_all_reduce(group, &grads, &grads, BRAID_AVG, NULL, &work);   // NULL: default call options
 *   ... overlap ...
 *   braid_work_wait(work, -1);
 *   braid_work_free(work);
 *   braid_group_destroy(group);
 *
 * Errors: every call returns a braid_status (BRAID_OK is 0); on failure,
 * braid_last_error() gives the calling thread's last message, which names
 * the rank, the peer and the collective where braid knows them ("allreduce
 * seq 7: rank 0: tcp: peer 1 closed the connection"). The codes are the
 * canonical ones of gRPC and Abseil.
 *
 * Threads: a group may be used from several threads; collectives run in the
 * order they are issued, which must be the same on every rank (as in MPI and
 * c10d). A work handle may be waited on from any thread.
 */
#ifndef BRAID_CAPI_BRAID_H_
#define BRAID_CAPI_BRAID_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BRAID_API __attribute__((visibility("default")))

/* Bumped when a struct or a signature below changes. */
#define BRAID_ABI_VERSION 2

typedef enum {
  BRAID_OK = 0,
  BRAID_CANCELLED = 1,
  BRAID_UNKNOWN = 2,
  BRAID_INVALID_ARGUMENT = 3,    /* a bad buffer, dtype, op, rank or option */
  BRAID_DEADLINE_EXCEEDED = 4,   /* a wait ran past its deadline */
  BRAID_NOT_FOUND = 5,           /* e.g. a peer process that is gone */
  BRAID_ALREADY_EXISTS = 6,
  BRAID_PERMISSION_DENIED = 7,   /* the job secret did not match */
  BRAID_RESOURCE_EXHAUSTED = 8,
  BRAID_FAILED_PRECONDITION = 9, /* e.g. ranks disagree on a collective */
  BRAID_ABORTED = 10,            /* the group was aborted */
  BRAID_OUT_OF_RANGE = 11,
  BRAID_UNIMPLEMENTED = 12,
  BRAID_INTERNAL = 13,
  BRAID_UNAVAILABLE = 14,        /* a peer closed its connection */
  BRAID_DATA_LOSS = 15,
  BRAID_UNAUTHENTICATED = 16,
  BRAID_STATUS_MAX_ENUM = 0x7fffffff, /* every int is a valid value (checked, not undefined) */
} braid_status;

typedef enum {
  BRAID_FLOAT32 = 0,
  BRAID_FLOAT64 = 1,
  BRAID_FLOAT16 = 2,
  BRAID_BFLOAT16 = 3,
  BRAID_INT8 = 4,
  BRAID_UINT8 = 5,
  BRAID_INT32 = 6,
  BRAID_INT64 = 7,
  BRAID_DTYPE_MAX_ENUM = 0x7fffffff,
} braid_dtype;

typedef enum {
  BRAID_SUM = 0,
  BRAID_PROD = 1,
  BRAID_MIN = 2,
  BRAID_MAX = 3,
  BRAID_AVG = 4,
  BRAID_OP_MAX_ENUM = 0x7fffffff,
} braid_op;

typedef enum { BRAID_CPU = 0, BRAID_CUDA = 1, BRAID_DEVICE_MAX_ENUM = 0x7fffffff } braid_device_type;

typedef struct {
  braid_device_type type;
  int index; /* CUDA ordinal; 0 for the CPU */
} braid_device;

/* `count` contiguous elements of `dtype` at `data` on `device`. */
typedef struct {
  void* data;
  int64_t count;
  braid_dtype dtype;
  braid_device device;
} braid_buffer;

typedef struct braid_group braid_group;
typedef struct braid_work braid_work;
typedef struct braid_reducer braid_reducer;

/* "0.4.0": braid's version; braid_abi_version() is BRAID_ABI_VERSION of the
 * library that was loaded (compare it with the header's). */
BRAID_API const char* braid_version(void);
BRAID_API int braid_abi_version(void);

/* The calling thread's last error message ("" after a success). The pointer
 * stays valid until the thread's next braid call. */
BRAID_API const char* braid_last_error(void);

/* ---- Memory the peers on this host map --------------------------------
 * As ncclMemAlloc: `bytes` of zeroed host memory (a memfd of its own) that
 * the group's shm peers map once and then read and write in place, with no
 * kernel copy; collectives on buffers inside it take braid's fastest
 * one-host paths. Any buffer still works, only slower. 4 KiB pages (no
 * huge pages): for communication buffers, not compute. A forked child gets
 * a private copy. BRAID_RESOURCE_EXHAUSTED when no more can be made (a
 * quarter of the descriptor limit, at most 1,024, are live): use ordinary
 * memory then. */
BRAID_API braid_status braid_mem_alloc(size_t bytes, void** data);
/* Frees what braid_mem_alloc returned (NULL: nothing). Peers that mapped it
 * keep their pages until they let go of them. */
BRAID_API void braid_mem_free(void* data);

/* ---- A store of the caller's, to rendezvous over ------------------------
 * By default a group meets through braid's own store (braidrun's, or one
 * that rank 0 hosts on MASTER_ADDR:MASTER_PORT). A framework with a store of
 * its own (torch's c10d::Store) passes these functions instead. Each returns
 * 0 on success, or nonzero after which error(ctx) may give a message. */
typedef struct {
  void* ctx;
  int (*set)(void* ctx, const char* key, const void* value, size_t size);
  /* Blocks until `key` exists or timeout_ms passes (then nonzero); hands the
   * value to sink(sink_ctx, ...), which copies it. */
  int (*get)(void* ctx, const char* key, int64_t timeout_ms, void (*sink)(void* sink_ctx, const void* value, size_t size),
             void* sink_ctx);
  /* Adds `delta` to the integer at `key` (0 if absent); the new value in *result. */
  int (*add)(void* ctx, const char* key, int64_t delta, int64_t* result);
  /* *exists = whether every key exists. */
  int (*check)(void* ctx, const char* const* keys, size_t count, int* exists);
  /* *existed = whether it was there. */
  int (*remove)(void* ctx, const char* key, int* existed);
  /* Optional (NULL): the message of the last failure. */
  const char* (*error)(void* ctx);
  /* Optional (NULL): braid is done with ctx. Called once, from
   * braid_group_create when it fails or else when the group is freed; until
   * then ctx stays valid, since braid meets over the store again (a CUDA
   * device's communicator, made on first use). NULL: the caller keeps ctx
   * alive as long as the group. */
  void (*release)(void* ctx);
} braid_store_ops;

/* ---- Groups --------------------------------------------------------------- */

typedef struct {
  /* -1: from the environment (RANK / WORLD_SIZE, as braidrun, torchrun and
   * mpirun set them). Set both with `store`, for frameworks that know them. */
  int rank;
  int world_size;
  /* Rendezvous and per-collective deadline in seconds; <= 0: BRAID_TIMEOUT_SEC (600). */
  double timeout_sec;
  /* "auto", "shm", "tcp", "mpi", "nccl"; NULL: BRAID_TRANSPORT (auto). */
  const char* transport;
  /* NULL: braid's store from the environment. Copied; see release for ctx. */
  const braid_store_ops* store;
} braid_group_options;

BRAID_API void braid_group_options_init(braid_group_options* options);

/* Collective: every rank calls it; blocks until the group is up or the
 * deadline, naming the ranks that never arrived. `options` may be NULL. */
BRAID_API braid_status braid_group_create(const braid_group_options* options, braid_group** group);
/* Releases the caller's reference; the last one finishes what was issued
 * (each bounded by its deadline) and frees the group. */
BRAID_API void braid_group_destroy(braid_group* group);
/* One more owner of `group` in this process, which releases it with
 * braid_group_destroy: how two bindings (braid.init() and torch's process
 * group) share one group, one store and one set of connections. */
BRAID_API void braid_group_retain(braid_group* group);
BRAID_API int braid_group_rank(const braid_group* group);
BRAID_API int braid_group_size(const braid_group* group);
BRAID_API int braid_group_local_rank(const braid_group* group);
BRAID_API int braid_group_local_size(const braid_group* group);
/* "shm", "tcp", "mpi" or "nccl": what carries CPU buffers. */
BRAID_API const char* braid_group_transport(const braid_group* group);
/* Subgroups. Collective over `group` (every rank calls it, at the same point
 * of its sequence of collectives): the ranks of one `color` (>= 0) form a new
 * group ordered by (`key`, rank), as MPI_Comm_split; a negative color gets a
 * group whose every collective fails, naming it. `name` (NULL: derived)
 * labels its logs, flight recorder and timeline. A subgroup is independent of
 * its parent once made (destroy either first); the reducer and
 * braid_broadcast_buffers take only groups made by braid_group_create. */
BRAID_API braid_status braid_group_split(braid_group* group, int color, int key, const char* name,
                                         braid_group** subgroup);
/* The subgroup of `ranks` (ranks of `group`, in the new order), as torch's
 * new_group: every rank passes the same list (a clear error on every rank
 * otherwise); ranks outside it get a group that refuses every collective. */
BRAID_API braid_status braid_group_new(braid_group* group, const int* ranks, int count, const char* name,
                                       braid_group** subgroup);
/* 1 when this rank belongs to `group` (0: an outsider of braid_group_new or
 * a negative color's group, whose rank is -1). */
BRAID_API int braid_group_is_member(const braid_group* group);

/* Fails every pending and later collective of this rank with `reason`, and
 * tells the peers, whose collectives fail too instead of waiting for their
 * deadline. The group cannot be used again; destroy it. */
BRAID_API void braid_group_abort(braid_group* group, const char* reason);

/* ---- Collectives ----------------------------------------------------------
 * Each takes the group, its buffers, and `call`: per-call options, or NULL
 * for the defaults. With `work` NULL the call blocks until the collective is
 * done (bounded by the deadline); otherwise it returns with a handle in
 * *work, which the caller waits on and frees. Buffers must stay alive and
 * untouched until then. Out-of-place unless the two buffers are the same. */

typedef struct {
  /* > 0: this call's deadline in seconds, from when it is issued; <= 0: the group's. */
  double timeout_sec;
  /* An algorithm as BRAID_ALGO names it ("ring", "tree", ...); NULL or "auto": the group's choice. */
  const char* algorithm;
  /* Device buffers: the stream whose work the call follows. NULL (the only
   * value accepted today): CUDA buffers are ordered synchronously with the device. */
  void* stream;
  /* 1: never run on the caller's thread, whatever the size (torch's
   * async_op=True: the caller overlaps its own work); 0: small collectives on
   * an idle group may run inline. */
  int async;
} braid_call_options;

BRAID_API void braid_call_options_init(braid_call_options* call);

/* out = op over ranks of in; in.count == out.count. */
BRAID_API braid_status braid_all_reduce(braid_group* group, const braid_buffer* in, const braid_buffer* out,
                                        braid_op op, const braid_call_options* call, braid_work** work);
/* Root's buffer to every rank. */
BRAID_API braid_status braid_broadcast(braid_group* group, const braid_buffer* buffer, int root,
                                       const braid_call_options* call, braid_work** work);
/* out (on root only; others may pass in) = op over ranks of in. */
BRAID_API braid_status braid_reduce(braid_group* group, const braid_buffer* in, const braid_buffer* out,
                                    braid_op op, int root, const braid_call_options* call, braid_work** work);
/* out.count == size * in.count; rank r's in lands at out[r * in.count]. */
BRAID_API braid_status braid_all_gather(braid_group* group, const braid_buffer* in, const braid_buffer* out,
                                        const braid_call_options* call, braid_work** work);
/* in.count == size * out.count; out = op over ranks of in[rank * out.count]. */
BRAID_API braid_status braid_reduce_scatter(braid_group* group, const braid_buffer* in, const braid_buffer* out,
                                            braid_op op, const braid_call_options* call, braid_work** work);
/* in.count == out.count == size * n: block r of in goes to rank r, and
 * block r of out comes from rank r. */
BRAID_API braid_status braid_all_to_all(braid_group* group, const braid_buffer* in, const braid_buffer* out,
                                        const braid_call_options* call, braid_work** work);
BRAID_API braid_status braid_barrier(braid_group* group, const braid_call_options* call, braid_work** work);
/* Point to point; the peer posts the matching call (same count and dtype). */
BRAID_API braid_status braid_send(braid_group* group, const braid_buffer* buffer, int peer,
                                  const braid_call_options* call, braid_work** work);
/* peer BRAID_ANY_SOURCE: from whichever peer sends first (shm, tcp, mpi;
 * nccl refuses it); braid_work_source names that peer. */
BRAID_API braid_status braid_recv(braid_group* group, const braid_buffer* buffer, int peer,
                                  const braid_call_options* call, braid_work** work);
#define BRAID_ANY_SOURCE (-1)

/* ---- Work handles --------------------------------------------------------- */

/* *done = 1 once finished; returns BRAID_OK while running, else its result. */
BRAID_API braid_status braid_work_test(braid_work* work, int* done);
/* Blocks until finished (its result) or `timeout_sec` (BRAID_DEADLINE_EXCEEDED;
 * it keeps running). timeout_sec < 0: the collective's own deadline. */
BRAID_API braid_status braid_work_wait(braid_work* work, double timeout_sec);
/* The peer a finished braid_recv received from; -1 before it finished or
 * for any other call. */
BRAID_API int braid_work_source(const braid_work* work);
/* Calls fn(arg) once the work has finished: at once on this thread if it
 * already has, else on the thread that finishes it (braid's own, which may
 * hold braid's locks: fn must be short, must not block and must not call
 * braid). For an owner's waiter to be woken when there is something to
 * complete rather than at every issue. Works after braid_work_free too. */
BRAID_API braid_status braid_work_on_finish(braid_work* work, void (*fn)(void* arg), void* arg);
/* Frees the handle (the collective itself goes on to its end). */
BRAID_API void braid_work_free(braid_work* work);

/* ---- The bucketed reducer (as DDP's) ------------------------------------
 * For trainers that own their gradients: register them once, then each
 * iteration prepare, mark each gradient ready as backward produces it
 * (reductions start while backward goes on), and finalize (the average of
 * every rank's gradients is then in the buffers). */

typedef struct {
  double bucket_cap_mb;   /* <= 0: 25 */
  double first_bucket_mb; /* <= 0: 1 */
  int find_unused_parameters;
} braid_reducer_options;

BRAID_API void braid_reducer_options_init(braid_reducer_options* options);
/* Collective: checks every rank registered the same gradients. The buffers
 * must outlive the reducer; `options` may be NULL. */
BRAID_API braid_status braid_reducer_create(braid_group* group, const braid_buffer* gradients, int count,
                                            const braid_reducer_options* options, braid_reducer** reducer);
BRAID_API void braid_reducer_destroy(braid_reducer* reducer);
BRAID_API braid_status braid_reducer_prepare(braid_reducer* reducer);
BRAID_API braid_status braid_reducer_mark_ready(braid_reducer* reducer, int index);
BRAID_API braid_status braid_reducer_finalize(braid_reducer* reducer);
/* Between begin and end, iterations accumulate without synchronizing (DDP's
 * no_sync()); nests. */
BRAID_API braid_status braid_reducer_no_sync_begin(braid_reducer* reducer);
BRAID_API braid_status braid_reducer_no_sync_end(braid_reducer* reducer);
/* Root's values to every rank (parameters at the start of training). Collective. */
BRAID_API braid_status braid_broadcast_buffers(braid_group* group, const braid_buffer* buffers, int count, int root);

#ifdef __cplusplus
}
#endif

#endif /* BRAID_CAPI_BRAID_H_ */
