/* A braid worker in plain C (compiled as C11, linked against libbraid.so):
 * every collective through the C API, checked element by element, plus the
 * error paths. Run under braidrun; prints "capi ok: rank R of N" at the end,
 * and exits 1 naming the first wrong value. */
#define _POSIX_C_SOURCE 199309L /* nanosleep under -std=c11 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capi/braid.h"

static int rank, size;

/* braid_work_on_finish's callback: counts its calls, after the result is in place. */
static atomic_int finish_calls;
static float finish_value;
static void count_finish(void* arg) {
  finish_value = *(float*)arg;
  atomic_fetch_add(&finish_calls, 1);
}

#define CHECK_OK(call)                                                                  \
  do {                                                                                  \
    braid_status status_ = (call);                                                      \
    if (status_ != BRAID_OK) {                                                          \
      fprintf(stderr, "rank %d: %s failed (%d): %s\n", rank, #call, status_, braid_last_error()); \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

static void expect(int ok, const char* what, long index, double got, double want) {
  if (!ok) {
    fprintf(stderr, "rank %d: %s: element %ld is %g, expected %g\n", rank, what, index, got, want);
    exit(1);
  }
}

static braid_buffer f32(float* data, int64_t count) {
  braid_buffer b = {data, count, BRAID_FLOAT32, {BRAID_CPU, 0}};
  return b;
}

int main(void) {
  if (braid_abi_version() != BRAID_ABI_VERSION) {
    fprintf(stderr, "library ABI %d, header %d\n", braid_abi_version(), BRAID_ABI_VERSION);
    return 1;
  }
  braid_group* group = NULL;
  if (braid_group_create(NULL, &group) != BRAID_OK) {
    fprintf(stderr, "braid_group_create: %s\n", braid_last_error());
    return 1;
  }
  rank = braid_group_rank(group);
  size = braid_group_size(group);
  enum { N = 1000 };
  float* in = malloc(sizeof(float) * N * 8);
  float* out = malloc(sizeof(float) * N * 8);

  /* all-reduce, in place and blocking: sum of (rank + 1) * i. */
  for (int i = 0; i < N; ++i) in[i] = (float)((rank + 1) * i);
  braid_buffer b = f32(in, N);
  CHECK_OK(braid_all_reduce(group, &b, &b, BRAID_SUM, NULL, NULL));
  const float ranks_sum = (float)(size * (size + 1) / 2);
  for (int i = 0; i < N; ++i) expect(in[i] == ranks_sum * i, "all_reduce sum", i, in[i], ranks_sum * i);

  /* all-reduce out of place, asynchronous, max; test then wait. */
  for (int i = 0; i < N; ++i) in[i] = (float)(rank * 10 + i % 7);
  braid_buffer bi = f32(in, N), bo = f32(out, N);
  braid_work* work = NULL;
  CHECK_OK(braid_all_reduce(group, &bi, &bo, BRAID_MAX, NULL, &work));
  int done = 0;
  CHECK_OK(braid_work_test(work, &done));
  CHECK_OK(braid_work_wait(work, 30.0));
  CHECK_OK(braid_work_test(work, &done));
  expect(done == 1, "work_test after wait", 0, done, 1);
  braid_work_free(work);
  for (int i = 0; i < N; ++i) {
    const float want = (float)((size - 1) * 10 + i % 7);
    expect(out[i] == want, "all_reduce max", i, out[i], want);
  }

  /* braid_mem_alloc: memory the peers map, zeroed; all-reduce in it in and out of place. */
  float* shared_in = NULL;
  float* shared_out = NULL;
  CHECK_OK(braid_mem_alloc(sizeof(float) * N * 64, (void**)&shared_in));
  CHECK_OK(braid_mem_alloc(sizeof(float) * N * 64, (void**)&shared_out));
  for (int i = 0; i < N * 64; ++i) expect(shared_in[i] == 0.0f, "braid_mem_alloc zeroed", i, shared_in[i], 0);
  for (int i = 0; i < N * 64; ++i) shared_in[i] = (float)(rank + 1 + i % 5);
  braid_buffer mi = f32(shared_in, N * 64), mo = f32(shared_out, N * 64);
  CHECK_OK(braid_all_reduce(group, &mi, &mo, BRAID_SUM, NULL, NULL));
  CHECK_OK(braid_all_reduce(group, &mi, &mi, BRAID_SUM, NULL, NULL));
  for (int i = 0; i < N * 64; ++i) {
    const float want = ranks_sum + (float)(size * (i % 5));
    expect(shared_out[i] == want, "all_reduce in braid_mem_alloc memory", i, shared_out[i], want);
    expect(shared_in[i] == want, "all_reduce in place in braid_mem_alloc memory", i, shared_in[i], want);
  }
  braid_mem_free(shared_in);
  braid_mem_free(shared_out);
  braid_mem_free(NULL);
  void* none = &none;
  expect(braid_mem_alloc(0, &none) == BRAID_INVALID_ARGUMENT && none == NULL, "braid_mem_alloc(0)", 0, 0, 0);
  expect(braid_mem_alloc(16, NULL) == BRAID_INVALID_ARGUMENT, "braid_mem_alloc into NULL", 0, 0, 0);

  /* broadcast from the last rank, int64. */
  int64_t longs[N];
  for (int i = 0; i < N; ++i) longs[i] = rank == size - 1 ? (int64_t)i * 1000003 : -1;
  braid_buffer bl = {longs, N, BRAID_INT64, {BRAID_CPU, 0}};
  CHECK_OK(braid_broadcast(group, &bl, size - 1, NULL, NULL));
  for (int i = 0; i < N; ++i) expect(longs[i] == (int64_t)i * 1000003, "broadcast", i, (double)longs[i], i * 1000003.0);

  /* all-gather: rank r contributes N elements of value r + i. */
  for (int i = 0; i < N; ++i) in[i] = (float)(rank + i);
  bi = f32(in, N);
  bo = f32(out, (int64_t)N * size);
  CHECK_OK(braid_all_gather(group, &bi, &bo, NULL, NULL));
  for (int r = 0; r < size; ++r) {
    for (int i = 0; i < N; ++i) expect(out[r * N + i] == (float)(r + i), "all_gather", r * N + i, out[r * N + i], r + i);
  }

  /* reduce-scatter, average: every rank sends size * N elements. */
  for (int j = 0; j < N * size; ++j) in[j] = (float)(rank + j);
  bi = f32(in, (int64_t)N * size);
  bo = f32(out, N);
  CHECK_OK(braid_reduce_scatter(group, &bi, &bo, BRAID_AVG, NULL, NULL));
  for (int i = 0; i < N; ++i) {
    const float want = (float)(size - 1) / 2.0f + (float)(rank * N + i);
    expect(fabsf(out[i] - want) < 1e-3f, "reduce_scatter avg", i, out[i], want);
  }

  /* reduce to rank 0, min. */
  for (int i = 0; i < N; ++i) in[i] = (float)(100 - rank + i);
  bi = f32(in, N);
  bo = f32(out, N);
  CHECK_OK(braid_reduce(group, &bi, &bo, BRAID_MIN, 0, NULL, NULL));
  if (rank == 0) {
    for (int i = 0; i < N; ++i) expect(out[i] == (float)(100 - (size - 1) + i), "reduce min", i, out[i], 100 - (size - 1) + i);
  }

  /* all-to-all: block d of rank r's input is r * 100 + d. */
  for (int d = 0; d < size; ++d) {
    for (int i = 0; i < N; ++i) in[d * N + i] = (float)(rank * 100 + d);
  }
  bi = f32(in, (int64_t)N * size);
  bo = f32(out, (int64_t)N * size);
  CHECK_OK(braid_all_to_all(group, &bi, &bo, NULL, NULL));
  for (int s = 0; s < size; ++s) {
    for (int i = 0; i < N; ++i) expect(out[s * N + i] == (float)(s * 100 + rank), "all_to_all", s * N + i, out[s * N + i], s * 100 + rank);
  }

  /* send / recv around a ring (even ranks send first). */
  if (size > 1) {
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int i = 0; i < N; ++i) in[i] = (float)(rank * 7 + i);
    bi = f32(in, N);
    bo = f32(out, N);
    braid_work* sent = NULL;
    CHECK_OK(braid_send(group, &bi, next, NULL, &sent));
    CHECK_OK(braid_recv(group, &bo, prev, NULL, NULL));
    CHECK_OK(braid_work_wait(sent, -1));
    braid_work_free(sent);
    for (int i = 0; i < N; ++i) expect(out[i] == (float)(prev * 7 + i), "send/recv", i, out[i], prev * 7 + i);
  }

  CHECK_OK(braid_barrier(group, NULL, NULL));

  /* Call options: an async call with its own deadline and algorithm runs like any other. */
  braid_call_options call;
  braid_call_options_init(&call);
  call.timeout_sec = 30;
  call.algorithm = "ring";
  call.async = 1;
  for (int i = 0; i < N; ++i) in[i] = (float)(rank + 1);
  b = f32(in, N);
  CHECK_OK(braid_all_reduce(group, &b, &b, BRAID_SUM, &call, &work));
  /* The finish callback runs once, with the result already written; one
   * registered after the end runs at once, on this thread. */
  CHECK_OK(braid_work_on_finish(work, count_finish, in));
  CHECK_OK(braid_work_wait(work, -1));
  /* The waiter may return just before the finishing thread calls back: allow it 10 s. */
  for (int ms = 0; atomic_load(&finish_calls) < 1 && ms < 10000; ++ms) nanosleep(&(struct timespec){0, 1000000}, NULL);
  expect(atomic_load(&finish_calls) == 1, "on_finish calls after the wait", 0, atomic_load(&finish_calls), 1);
  expect(finish_value == (float)(size * (size + 1) / 2), "on_finish sees the result", 0, finish_value,
         size * (size + 1) / 2);
  CHECK_OK(braid_work_on_finish(work, count_finish, in));
  expect(atomic_load(&finish_calls) == 2, "on_finish of a finished work", 0, atomic_load(&finish_calls), 2);
  braid_work_free(work);
  for (int i = 0; i < N; ++i) {
    expect(in[i] == (float)(size * (size + 1) / 2), "async all-reduce", i, in[i], size * (size + 1) / 2);
  }

  /* Errors: a bad dtype, an unknown algorithm and a CUDA stream are refused with a code and a message, and the group goes on. */
  braid_buffer bad = f32(in, N);
  bad.dtype = (braid_dtype)42;
  if (braid_all_reduce(group, &bad, &bad, BRAID_SUM, NULL, NULL) != BRAID_INVALID_ARGUMENT ||
      strstr(braid_last_error(), "unknown braid_dtype 42") == NULL) {
    fprintf(stderr, "rank %d: a bad dtype gave \"%s\"\n", rank, braid_last_error());
    return 1;
  }
  b = f32(in, N);
  braid_call_options_init(&call);
  call.algorithm = "no-such-algorithm";
  if (braid_all_reduce(group, &b, &b, BRAID_SUM, &call, NULL) != BRAID_INVALID_ARGUMENT ||
      strstr(braid_last_error(), "no-such-algorithm") == NULL) {
    fprintf(stderr, "rank %d: an unknown algorithm gave \"%s\"\n", rank, braid_last_error());
    return 1;
  }
  braid_call_options_init(&call);
  call.stream = (void*)1;
  if (braid_all_reduce(group, &b, &b, BRAID_SUM, &call, NULL) != BRAID_UNIMPLEMENTED ||
      strstr(braid_last_error(), "stream") == NULL) {
    fprintf(stderr, "rank %d: a stream gave \"%s\"\n", rank, braid_last_error());
    return 1;
  }
  b = f32(in, 3);
  bo = f32(out, 4);
  if (braid_all_reduce(group, &b, &bo, BRAID_SUM, NULL, NULL) == BRAID_OK) {
    fprintf(stderr, "rank %d: an all-reduce of 3 into 4 elements succeeded\n", rank);
    return 1;
  }

  /* The reducer: two gradients averaged across ranks, then no_sync accumulation. */
  float g0[300], g1[40];
  braid_buffer grads[2] = {f32(g0, 300), f32(g1, 40)};
  braid_reducer* reducer = NULL;
  CHECK_OK(braid_reducer_create(group, grads, 2, NULL, &reducer));
  CHECK_OK(braid_reducer_prepare(reducer));
  for (int i = 0; i < 300; ++i) g0[i] = (float)rank;
  for (int i = 0; i < 40; ++i) g1[i] = (float)(2 * rank + i);
  CHECK_OK(braid_reducer_mark_ready(reducer, 1));
  CHECK_OK(braid_reducer_mark_ready(reducer, 0));
  CHECK_OK(braid_reducer_finalize(reducer));
  const float mean_rank = (float)(size - 1) / 2.0f;
  for (int i = 0; i < 300; ++i) expect(fabsf(g0[i] - mean_rank) < 1e-5f, "reducer g0", i, g0[i], mean_rank);
  for (int i = 0; i < 40; ++i) expect(fabsf(g1[i] - (2 * mean_rank + i)) < 1e-4f, "reducer g1", i, g1[i], 2 * mean_rank + i);
  CHECK_OK(braid_reducer_no_sync_begin(reducer));
  CHECK_OK(braid_reducer_prepare(reducer));
  CHECK_OK(braid_reducer_mark_ready(reducer, 0));
  CHECK_OK(braid_reducer_mark_ready(reducer, 1));
  CHECK_OK(braid_reducer_finalize(reducer));
  CHECK_OK(braid_reducer_no_sync_end(reducer));
  for (int i = 0; i < 300; ++i) expect(fabsf(g0[i] - mean_rank) < 1e-5f, "no_sync left g0 alone", i, g0[i], mean_rank);
  if (braid_reducer_no_sync_end(reducer) != BRAID_FAILED_PRECONDITION) {
    fprintf(stderr, "rank %d: an unmatched no_sync_end was accepted\n", rank);
    return 1;
  }
  braid_reducer_destroy(reducer);

  /* Parameters from rank 0. */
  for (int i = 0; i < 300; ++i) g0[i] = (float)(rank * 1000 + i);
  grads[0] = f32(g0, 300);
  CHECK_OK(braid_broadcast_buffers(group, grads, 1, 0));
  for (int i = 0; i < 300; ++i) expect(g0[i] == (float)i, "broadcast_buffers", i, g0[i], i);

  /* Subgroups: ranks by parity; then [last rank] alone, the others outside. */
  braid_group* half = NULL;
  CHECK_OK(braid_group_split(group, rank % 2, rank, "half", &half));
  expect(braid_group_rank(half) == rank / 2, "split rank", 0, braid_group_rank(half), rank / 2);
  float mine = (float)rank;
  braid_buffer m = f32(&mine, 1);
  CHECK_OK(braid_all_reduce(half, &m, &m, BRAID_SUM, NULL, NULL));
  float parity_sum = 0;
  for (int r = rank % 2; r < size; r += 2) parity_sum += (float)r;
  expect(mine == parity_sum, "split all_reduce", 0, mine, parity_sum);
  braid_group_destroy(half);
  braid_group* last = NULL;
  const int last_rank = size - 1;
  CHECK_OK(braid_group_new(group, &last_rank, 1, "last", &last));
  const braid_status outsider = braid_all_reduce(last, &m, &m, BRAID_SUM, NULL, NULL);
  if (braid_group_is_member(last) != (rank == last_rank) ||
      (rank != last_rank && (outsider != BRAID_FAILED_PRECONDITION || !strstr(braid_last_error(), "'last'")))) {
    fprintf(stderr, "rank %d: subgroup 'last': member %d, status %d (%s)\n", rank, braid_group_is_member(last),
            outsider, braid_last_error());
    return 1;
  }
  braid_group_destroy(last);

  /* Two owners: the first braid_group_destroy only releases a reference. */
  braid_group_retain(group);
  braid_group_destroy(group);
  mine = 1;
  CHECK_OK(braid_all_reduce(group, &m, &m, BRAID_SUM, NULL, NULL));
  expect(mine == (float)size, "all_reduce after releasing one of two references", 0, mine, (float)size);

  printf("capi ok: rank %d of %d over %s, braid %s\n", rank, size, braid_group_transport(group), braid_version());
  free(in);
  free(out);
  braid_group_destroy(group);
  return 0;
}
