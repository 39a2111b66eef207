// hosts_worker: the worker of the multi-host test bed (tests/netns/). One
// process per rank under braidrun, on "hosts" that are network namespaces.
// It first checks that the bed looks like several hosts to braid (ranks of
// one node share a host name and /dev/shm, ranks of different nodes have
// different names), then runs every collective at several sizes and checks
// each element exactly against a reference computed here. Values are small
// integers, so every dtype (f16 and bf16 included) holds every partial sum
// exactly whatever order an algorithm adds in.
//
// The algorithm is whatever the communicator picks: BRAID_ALGO when set
// (collectives/selection.h names them), else the selector's choice; the
// worker prints what all-reduce ran at each size.
//
// Flags:
//   --expect-transport=T   fail unless comm() runs over T (auto across hosts must pick tcp)
//   --large-bytes=N        the largest size checked (default 1 MiB; odd element counts are added)
//   --loop=S               instead of the checks: 1 MiB all-reduces, each checked, back to back
//                          for S seconds; prints "hosts worker rank R looping" after the first
//                          (the link-down test cuts a link then)
// Prints, last, per rank: "hosts worker rank R/W host NAME transport T ok".
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/socket.h"
#include "base/status.h"
#include "collectives/selection.h"
#include "runtime/process_group.h"
#include "tensor/dtype.h"
#include "tensor/reduce.h"
#include "tensor/tensor.h"

namespace braid {
namespace {

std::string Flag(int argc, char** argv, const std::string& name, const std::string& fallback = "") {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, name + "=")) return std::string(arg);
  }
  return fallback;
}

absl::Status Finish(absl::StatusOr<WorkHandle> work) { return work.ok() ? (*work)->Wait() : work.status(); }

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// Element i of a tensor of any dtype, as a double (exact for the small
// integers the checks use).
double Get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return t.data<float>()[i];
    case DType::kF64: return t.data<double>()[i];
    case DType::kF16: return HalfToFloat(t.data<Half>()[i]);
    case DType::kBF16: return BFloat16ToFloat(t.data<BFloat16>()[i]);
    case DType::kI8: return t.data<int8_t>()[i];
    case DType::kU8: return t.data<uint8_t>()[i];
    case DType::kI32: return t.data<int32_t>()[i];
    case DType::kI64: return static_cast<double>(t.data<int64_t>()[i]);
  }
  return 0;
}

void Set(const Tensor& t, int64_t i, int64_t v) {
  switch (t.dtype()) {
    case DType::kF32: t.data<float>()[i] = static_cast<float>(v); break;
    case DType::kF64: t.data<double>()[i] = static_cast<double>(v); break;
    case DType::kF16: t.data<Half>()[i] = FloatToHalf(static_cast<float>(v)); break;
    case DType::kBF16: t.data<BFloat16>()[i] = FloatToBFloat16(static_cast<float>(v)); break;
    case DType::kI8: t.data<int8_t>()[i] = static_cast<int8_t>(v); break;
    case DType::kU8: t.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
    case DType::kI32: t.data<int32_t>()[i] = static_cast<int32_t>(v); break;
    case DType::kI64: t.data<int64_t>()[i] = v; break;
  }
}

// What rank `rank` contributes at element i of the collective numbered
// `salt`, for `op`. Sums stay below 13 * ranks (exact in bf16 up to 19
// ranks, in int8 up to 9); products are powers of two up to 2^ranks; an
// average's inputs are multiples of the world size, so it is an integer.
int64_t Value(ReduceOp op, int rank, int world, int64_t i, int salt) {
  switch (op) {
    case ReduceOp::kProd: return (i + rank + salt) % 7 == 0 ? 2 : 1;
    case ReduceOp::kAvg: return world * ((i + 5 * rank + salt) % 4);
    default: return (7 * i + 3 * rank + salt) % 13;
  }
}

int64_t Reference(ReduceOp op, int world, int64_t i, int salt) {
  int64_t acc = Value(op, 0, world, i, salt);
  for (int r = 1; r < world; ++r) {
    const int64_t v = Value(op, r, world, i, salt);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  return op == ReduceOp::kAvg ? acc / world : acc;
}

// Fills t[i] = fn(i); checks t[i] == fn(i), naming the first element that differs.
template <typename Fn>
void Fill(const Tensor& t, Fn fn) {
  for (int64_t i = 0; i < t.numel(); ++i) Set(t, i, fn(i));
}
template <typename Fn>
absl::Status Expect(const Tensor& t, const std::string& what, Fn fn) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double want = static_cast<double>(fn(i));
    if (Get(t, i) != want) {
      return absl::InternalError(
          absl::StrCat(what, ": element ", i, " of ", t.numel(), " is ", Get(t, i), ", expected ", want));
    }
  }
  return absl::OkStatus();
}

class Checks {
 public:
  explicit Checks(Communicator& comm) : comm_(comm), rank_(comm.rank()), n_(comm.size()) {}

  // output = op over every rank's input: in place, and out of place when asked.
  absl::Status AllReduce(DType dtype, ReduceOp op, int64_t count, bool out_of_place = false) {
    const int salt = ++salt_;
    BRAID_ASSIGN_OR_RETURN(Tensor in, Tensor::Empty({count}, dtype));
    Fill(in, [&](int64_t i) { return Value(op, rank_, n_, i, salt); });
    Tensor out = in;
    if (out_of_place) {
      BRAID_ASSIGN_OR_RETURN(out, Tensor::Empty({count}, dtype));
    }
    BRAID_RETURN_IF_ERROR(Finish(comm_.AllReduce(in, out, op)));
    return Expect(out, Name("all-reduce", dtype, count, ReduceOpName(op)),
                  [&](int64_t i) { return Reference(op, n_, i, salt); });
  }

  // Rank r gets block r of the reduction of every rank's n blocks.
  absl::Status ReduceScatter(DType dtype, ReduceOp op, int64_t block) {
    const int salt = ++salt_;
    BRAID_ASSIGN_OR_RETURN(Tensor in, Tensor::Empty({block * n_}, dtype));
    BRAID_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({block}, dtype));
    Fill(in, [&](int64_t i) { return Value(op, rank_, n_, i, salt); });
    BRAID_RETURN_IF_ERROR(Finish(comm_.ReduceScatter(in, out, op)));
    return Expect(out, Name("reduce-scatter", dtype, block, ReduceOpName(op)),
                  [&](int64_t i) { return Reference(op, n_, rank_ * block + i, salt); });
  }

  // Block r of the output is rank r's input.
  absl::Status AllGather(DType dtype, int64_t block) {
    const int salt = ++salt_;
    BRAID_ASSIGN_OR_RETURN(Tensor in, Tensor::Empty({block}, dtype));
    BRAID_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros({block * n_}, dtype));
    Fill(in, [&](int64_t i) { return Value(ReduceOp::kSum, rank_, n_, i, salt); });
    BRAID_RETURN_IF_ERROR(Finish(comm_.AllGather(in, out)));
    return Expect(out, Name("all-gather", dtype, block),
                  [&](int64_t i) { return Value(ReduceOp::kSum, static_cast<int>(i / block), n_, i % block, salt); });
  }

  absl::Status Broadcast(DType dtype, int64_t count, int root) {
    const int salt = ++salt_;
    BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({count}, dtype));
    // Non-roots start from their own values: a broadcast that leaves them is caught.
    Fill(t, [&](int64_t i) { return Value(ReduceOp::kSum, rank_, n_, i, salt); });
    BRAID_RETURN_IF_ERROR(Finish(comm_.Broadcast(t, root)));
    return Expect(t, Name("broadcast", dtype, count, absl::StrCat("root ", root)),
                  [&](int64_t i) { return Value(ReduceOp::kSum, root, n_, i, salt); });
  }

  absl::Status Reduce(DType dtype, ReduceOp op, int64_t count, int root) {
    const int salt = ++salt_;
    BRAID_ASSIGN_OR_RETURN(Tensor in, Tensor::Empty({count}, dtype));
    BRAID_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros({count}, dtype));
    Fill(in, [&](int64_t i) { return Value(op, rank_, n_, i, salt); });
    BRAID_RETURN_IF_ERROR(Finish(comm_.Reduce(in, out, op, root)));
    const std::string what = Name("reduce", dtype, count, absl::StrCat(ReduceOpName(op), " root ", root));
    if (rank_ != root) return Expect(in, what + " (input kept)", [&](int64_t i) { return Value(op, rank_, n_, i, salt); });
    return Expect(out, what, [&](int64_t i) { return Reference(op, n_, i, salt); });
  }

  // Block p of rank r's input goes to rank p as its block r; element i of a
  // block from rank s to rank d is coded from (s, d, i), so a misrouted block shows.
  absl::Status AllToAll(DType dtype, int64_t block) {
    const int salt = ++salt_;
    auto code = [&](int64_t src, int64_t dst, int64_t i) { return (src * 5 + dst * 3 + i + salt) % 17; };
    BRAID_ASSIGN_OR_RETURN(Tensor in, Tensor::Empty({block * n_}, dtype));
    BRAID_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros({block * n_}, dtype));
    Fill(in, [&](int64_t i) { return code(rank_, i / block, i % block); });
    BRAID_RETURN_IF_ERROR(Finish(comm_.AllToAll(in, out)));
    return Expect(out, Name("all-to-all", dtype, block), [&](int64_t i) { return code(i / block, rank_, i % block); });
  }

  // Messages between the pairs `pairs` (src, dst), issued by every rank in
  // the same global order, each rank taking only its own: the earliest
  // unfinished pair always has both sides at the head of their queues, so
  // nothing waits in a cycle, even if a send waits for its receiver.
  absl::Status SendRecv(DType dtype, int64_t count, const std::vector<std::pair<int, int>>& pairs) {
    const int salt = ++salt_;
    std::vector<WorkHandle> works;
    std::vector<Tensor> buffers;  // alive until every Work is done
    std::vector<std::pair<Tensor, int>> received;  // buffer, source
    for (const auto& [src, dst] : pairs) {
      if (src != rank_ && dst != rank_) continue;
      BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({count}, dtype));
      absl::StatusOr<WorkHandle> work;
      if (src == rank_) {
        Fill(t, [&](int64_t i) { return Value(ReduceOp::kSum, src * 31 + dst, n_, i, salt); });
        work = comm_.Send(t, dst);
      } else {
        work = comm_.Recv(t, src);
      }
      BRAID_RETURN_IF_ERROR(work.status());
      works.push_back(*work);
      if (dst == rank_) received.emplace_back(t, src);
      buffers.push_back(t);
    }
    for (WorkHandle& work : works) BRAID_RETURN_IF_ERROR(work->Wait());
    for (const auto& [t, src] : received) {
      BRAID_RETURN_IF_ERROR(Expect(t, Name("recv", dtype, count, absl::StrCat("from ", src)), [&](int64_t i) {
        return Value(ReduceOp::kSum, src * 31 + rank_, n_, i, salt);
      }));
    }
    return absl::OkStatus();
  }

  absl::Status Barrier() { return Finish(comm_.Barrier()); }

  // "all-reduce ran: 8 B ring, ...": what the selector (or BRAID_ALGO) gave.
  std::string AllReduceAlgorithms(const std::vector<int64_t>& counts) {
    std::string out;
    for (int64_t count : counts) {
      absl::StatusOr<Tensor> t = Tensor::Empty({count}, DType::kF32);
      absl::StatusOr<Algorithm> algorithm =
          t.ok() ? comm_.AlgorithmFor(CollectiveKind::kAllReduce, count, DType::kF32, PeerMemoryOf(&*t, nullptr))
                 : t.status();
      absl::StrAppend(&out, out.empty() ? "" : ", ", count * 4, " B ",
                      algorithm.ok() ? AlgorithmName(*algorithm) : algorithm.status().ToString());
    }
    return out;
  }

 private:
  static std::string Name(const char* kind, DType dtype, int64_t count, const std::string& more = "") {
    return absl::StrCat(kind, " ", DTypeName(dtype), " x", count, more.empty() ? "" : " ", more);
  }

  Communicator& comm_;
  const int rank_;
  const int n_;
  int salt_ = 0;
};

// Ranks of one node share a host name, ranks of different nodes do not
// (UTS namespaces), and ranks of one host see one /dev/shm (what the shm
// transport and a hierarchical all-reduce within a host need).
absl::Status CheckHosts(ProcessGroup& group) {
  constexpr int64_t kName = 64;
  const std::string mine = HostName().substr(0, kName - 1);
  BRAID_ASSIGN_OR_RETURN(Tensor name, Tensor::Zeros({kName + 1}, DType::kU8));
  std::memcpy(name.data(), mine.data(), mine.size());
  name.data<uint8_t>()[kName] = static_cast<uint8_t>(group.env().group_rank);
  BRAID_ASSIGN_OR_RETURN(Tensor all, Tensor::Zeros({(kName + 1) * group.size()}, DType::kU8));
  BRAID_RETURN_IF_ERROR(Finish(group.comm().AllGather(name, all)));
  for (int r = 0; r < group.size(); ++r) {
    const auto* entry = all.data<uint8_t>() + r * (kName + 1);
    const std::string theirs(reinterpret_cast<const char*>(entry));
    const bool same_node = entry[kName] == group.env().group_rank;
    if (same_node != (theirs == mine)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", group.rank(), " (node ", group.env().group_rank, ", host ", mine, ") and rank ", r, " (node ",
          entry[kName], ", host ", theirs, "): ranks share a host name exactly when they share a node, "
          "and here they do not (is each agent in its own UTS namespace?)"));
    }
  }
  // Local rank 0 writes its host name into a segment named after the node;
  // the others read it back.
  const std::string segment = absl::StrCat("/braid_hosts_", Env("TORCHELASTIC_RUN_ID"), "_",
                                           group.env().master_port, "_", group.env().group_rank);
  if (group.env().local_rank == 0) {
    const int fd = shm_open(segment.c_str(), O_CREAT | O_TRUNC | O_RDWR, 0600);
    if (fd < 0 || write(fd, mine.data(), mine.size()) != static_cast<ssize_t>(mine.size())) {
      return absl::InternalError(absl::StrCat("shm_open/write ", segment, ": ", strerror(errno)));
    }
    close(fd);
  }
  BRAID_RETURN_IF_ERROR(Finish(group.comm().Barrier()));
  absl::Status shared;
  if (group.env().local_rank != 0) {
    char buffer[kName] = {};
    const int fd = shm_open(segment.c_str(), O_RDONLY, 0);
    const ssize_t got = fd < 0 ? -1 : read(fd, buffer, sizeof(buffer) - 1);
    if (fd >= 0) close(fd);
    if (got < 0 || std::string(buffer) != mine) {
      shared = absl::FailedPreconditionError(absl::StrCat("rank ", group.rank(), ": ", segment, " from local rank 0 ",
                                                          got < 0 ? strerror(errno) : "holds another host's name",
                                                          ": ranks of one host do not share /dev/shm"));
    }
  }
  BRAID_RETURN_IF_ERROR(Finish(group.comm().Barrier()));
  if (group.env().local_rank == 0) shm_unlink(segment.c_str());
  return shared;
}

absl::Status RunChecks(ProcessGroup& group, int64_t large_bytes) {
  Checks c(group.comm());
  const int n = group.size();
  // 8 bytes, a few KiB and tens of KiB with odd counts, and the large size plus 3 elements.
  auto counts = [&](DType dtype) {
    const int64_t element = static_cast<int64_t>(DTypeSize(dtype));
    return std::vector<int64_t>{8 / element, 777, 12345};
  };
  auto large = [&](DType dtype) { return large_bytes / static_cast<int64_t>(DTypeSize(dtype)) + 3; };
  const DType kMain[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32};
  for (DType dtype : kMain) {
    for (ReduceOp op : kAllReduceOps) {
      for (int64_t count : counts(dtype)) BRAID_RETURN_IF_ERROR(c.AllReduce(dtype, op, count));
    }
    BRAID_RETURN_IF_ERROR(c.AllReduce(dtype, ReduceOp::kSum, large(dtype)));
  }
  BRAID_RETURN_IF_ERROR(c.AllReduce(DType::kF32, ReduceOp::kMax, large(DType::kF32), /*out_of_place=*/true));
  BRAID_RETURN_IF_ERROR(c.AllReduce(DType::kF32, ReduceOp::kSum, 777, /*out_of_place=*/true));
  for (DType dtype : {DType::kF64, DType::kI8, DType::kU8, DType::kI64}) {
    BRAID_RETURN_IF_ERROR(c.AllReduce(dtype, ReduceOp::kSum, 8 / static_cast<int64_t>(DTypeSize(dtype))));
    BRAID_RETURN_IF_ERROR(c.AllReduce(dtype, ReduceOp::kMax, 777));
  }

  const std::vector<int64_t> blocks = {2, 333, large(DType::kF32) / n};
  for (int64_t block : blocks) {
    BRAID_RETURN_IF_ERROR(c.ReduceScatter(DType::kF32, ReduceOp::kSum, block));
    BRAID_RETURN_IF_ERROR(c.AllGather(DType::kF32, block));
    BRAID_RETURN_IF_ERROR(c.AllToAll(DType::kF32, block / n + 1));
  }
  BRAID_RETURN_IF_ERROR(c.ReduceScatter(DType::kBF16, ReduceOp::kMax, 333));
  BRAID_RETURN_IF_ERROR(c.AllGather(DType::kI8, 333));
  BRAID_RETURN_IF_ERROR(c.AllToAll(DType::kI32, 5));

  for (int root = 0; root < n; ++root) {
    BRAID_RETURN_IF_ERROR(c.Broadcast(DType::kF32, 2, root));
    BRAID_RETURN_IF_ERROR(c.Broadcast(DType::kBF16, 777, root));
    BRAID_RETURN_IF_ERROR(c.Reduce(DType::kF32, ReduceOp::kSum, 2, root));
    BRAID_RETURN_IF_ERROR(c.Reduce(DType::kI32, ReduceOp::kMax, 777, root));
  }
  BRAID_RETURN_IF_ERROR(c.Broadcast(DType::kF32, large(DType::kF32), n - 1));
  BRAID_RETURN_IF_ERROR(c.Reduce(DType::kF32, ReduceOp::kSum, large(DType::kF32), n - 1));
  for (int i = 0; i < 3; ++i) BRAID_RETURN_IF_ERROR(c.Barrier());

  // Every ordered pair at small sizes; a ring with one hop across hosts (r to
  // r + n/2) at the large size.
  std::vector<std::pair<int, int>> all_pairs, ring;
  for (int src = 0; src < n; ++src) {
    for (int dst = 0; dst < n; ++dst) {
      if (src != dst) all_pairs.emplace_back(src, dst);
    }
    ring.emplace_back(src, (src + 1) % n);
    if (n > 2) ring.emplace_back(src, (src + n / 2) % n);
  }
  BRAID_RETURN_IF_ERROR(c.SendRecv(DType::kF32, 2, all_pairs));
  BRAID_RETURN_IF_ERROR(c.SendRecv(DType::kI8, 777, all_pairs));
  BRAID_RETURN_IF_ERROR(c.SendRecv(DType::kF32, large(DType::kF32) / 4, ring));

  std::printf("hosts worker rank %d/%d all-reduce ran: %s\n", group.rank(), n,
              c.AllReduceAlgorithms({2, 777, 12345, large(DType::kF32)}).c_str());
  return c.Barrier();
}

// Subgroups of the job: one per host (which must take shared memory) and
// one per local index across hosts (tcp), each checked as the job is; then a
// NewGroup of the first and last ranks, which the others may not use.
absl::Status CheckSubgroups(ProcessGroup& group, int64_t large_bytes) {
  const HostLayout& layout = group.comm().host_layout();
  const int me = group.rank();
  BRAID_ASSIGN_OR_RETURN(auto host, group.Split(layout.host_of[me], me, "host"));
  BRAID_ASSIGN_OR_RETURN(auto across, group.Split(layout.local_rank_of[me], me, "across"));
  if (std::string(host->transport_name()) != "shm" || std::string(across->transport_name()) != "tcp") {
    return absl::InternalError(absl::StrCat("rank ", me, ": subgroups over ", host->transport_name(), " (host) and ",
                                            across->transport_name(), " (across), expected shm and tcp"));
  }
  for (Communicator* sub : {host.get(), across.get()}) {
    Checks c(*sub);
    const std::string what = absl::StrCat("subgroup '", sub->name(), "' (rank ", sub->rank(), " of ", sub->size(), ")");
    absl::Status status = c.AllReduce(DType::kF32, ReduceOp::kSum, 777);
    if (status.ok()) status = c.AllReduce(DType::kBF16, ReduceOp::kMax, large_bytes / 2 + 3);
    if (status.ok()) status = c.ReduceScatter(DType::kF32, ReduceOp::kSum, 333);
    if (status.ok()) status = c.AllGather(DType::kI8, 333);
    if (status.ok()) status = c.AllToAll(DType::kI32, 5);
    for (int root = 0; root < sub->size() && status.ok(); ++root) status = c.Broadcast(DType::kF32, 777, root);
    if (status.ok()) status = c.Barrier();
    BRAID_RETURN_IF_ERROR(Annotate(status, what));
  }
  const int n = group.size();
  BRAID_ASSIGN_OR_RETURN(auto ends, group.NewGroup({0, n - 1}, "ends"));
  BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({8}, DType::kF32));
  absl::StatusOr<WorkHandle> work = ends->AllReduce(t, ReduceOp::kSum);
  if (ends->member()) {
    BRAID_RETURN_IF_ERROR(Finish(std::move(work)));
  } else if (work.ok() || !absl::IsFailedPrecondition(work.status())) {
    return absl::InternalError(absl::StrCat("rank ", me, ": an outsider's all-reduce on 'ends': ",
                                            work.status().ToString()));
  }
  std::printf("hosts worker rank %d/%d subgroups ok\n", me, n);
  return Finish(group.comm().Barrier());
}

// 1 MiB all-reduces, checked, until `seconds` pass: a link cut lands in one.
absl::Status Loop(ProcessGroup& group, double seconds) {
  Checks c(group.comm());
  const absl::Time end = absl::Now() + absl::Seconds(seconds);
  for (int round = 0; absl::Now() < end; ++round) {
    BRAID_RETURN_IF_ERROR(c.AllReduce(DType::kF32, ReduceOp::kSum, (1 << 18) + 1));
    if (round == 0) {
      std::printf("hosts worker rank %d looping\n", group.rank());
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::StatusOr<std::unique_ptr<ProcessGroup>> created = InitFromEnv();
  if (!created.ok()) {
    std::fprintf(stderr, "hosts_worker: %s\n", created.status().ToString().c_str());
    return 1;
  }
  ProcessGroup& group = **created;
  const std::string transport = group.comm().transport_name();
  absl::Status status;
  const std::string expected = Flag(argc, argv, "--expect-transport");
  if (!expected.empty() && expected != transport) {
    status = absl::FailedPreconditionError(
        absl::StrCat("transport ", transport, ", expected ", expected, " (BRAID_TRANSPORT=",
                     Env("BRAID_TRANSPORT"), ")"));
  }
  int64_t large_bytes = int64_t{1} << 20;
  double loop = 0;
  if (!absl::SimpleAtoi(Flag(argc, argv, "--large-bytes", "1048576"), &large_bytes) || large_bytes < 64 ||
      !absl::SimpleAtod(Flag(argc, argv, "--loop", "0"), &loop)) {
    status = absl::InvalidArgumentError("bad --large-bytes or --loop");
  }
  if (status.ok()) status = CheckHosts(group);
  if (status.ok()) status = loop > 0 ? Loop(group, loop) : RunChecks(group, large_bytes);
  if (status.ok() && loop == 0 && Flag(argc, argv, "--subgroups", "0") == "1") {
    status = CheckSubgroups(group, large_bytes);
  }
  if (!status.ok()) {
    std::fprintf(stderr, "hosts_worker: rank %d/%d host %s transport %s: %s\n", group.rank(), group.size(),
                 HostName().c_str(), transport.c_str(), status.ToString().c_str());
    return 1;
  }
  std::printf("hosts worker rank %d/%d host %s transport %s ok\n", group.rank(), group.size(), HostName().c_str(),
              transport.c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) { return braid::Main(argc, argv); }
