#include "bench/braid_bench_options.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status.h"
#include "tensor/device.h"

namespace braid::bench {

const char kProgram[] = "braid_bench";
const char kSummary[] =
    "nccl-tests compatible collective benchmark for braid. Start one process per rank with braidrun,\n"
    "torchrun or mpirun, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself. Rank 0 prints\n"
    "the table (what its numbers mean, and the exit status, follow the flags).";

const char kDescription[] = R"(
One binary for nccl-tests' *_perf programs: -C allreduce, reducescatter, allgather, broadcast,
reduce, alltoall or sendrecv. Every rank is one process that joins its job with InitFromEnv(), so
it runs under braidrun, torchrun, mpirun, or with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT
set by hand; rank 0 prints the table:

  # nThread 1 nGpus 1 minBytes 8 maxBytes 67108864 step: 2(factor) ...
  #  Rank  0 Group  0 Pid  12345 on       host device cpu [local 0] <cpu>
  #                         out-of-place                       in-place
  #       size   count   type   redop    root     time   algbw   busbw #wrong ...
            8       2   float     sum      -1    10.24    0.00    0.00      0 ...
  # Out of bounds values : 0 OK
  # Avg bus bandwidth    : 1.2345

Sizes and counts are nccl-tests' (<coll>GetCollByteCount): for a step of `size` bytes, count =
size / element size; reduce-scatter sends count/n*n and receives count/n, all-gather sends count/n
and receives count/n*n, all-to-all sends and receives count/n*n (count/n per peer); the size column
is max(sent, received) bytes, the count column what the call is given. algbw = size / time; busbw =
algbw * the collective's factor (all-reduce 2(n-1)/n; reduce-scatter, all-gather, all-to-all
(n-1)/n; broadcast, reduce, send/recv 1). A step whose count rounds down to 0 is skipped.

In place, as nccl-tests lays it out: all-reduce and reduce use one buffer; reduce-scatter's output
is block `rank` of its input, all-gather's input is block `rank` of its output; broadcast is in
place by nature (its out-of-place column copies the root's input into the output buffer first,
inside the timed call, which is what an out-of-place broadcast costs); all-to-all and send/recv
have no in-place form in braid, and their in-place column is N/A (nccl-tests times it but reports
no errors).

Send/recv: each rank sends to rank+1 and receives from rank-1 (mod n), as nccl-tests does; braid
has no grouped send+receive, so even ranks issue the send first and odd ranks the receive, which
never deadlocks.

One table section per algorithm given to -a (all-reduce: ring, tree, rhd, native, auto; the
others: auto or native). Per size: with -c 1 the out-of-place and the in-place call are each run
once on exact-check data and compared element by element with a locally computed reference
(#wrong = mismatches summed over ranks); then each is run -w times untimed and -n times timed.
time = the average per iteration, the maximum over ranks.

-z 0 (default) issues all -n iterations and then waits on the last (the communicator runs them in
issue order); -z 1 waits for each before issuing the next. Buffers are allocated once, at the
largest size, and first touched before anything is timed; every size is a view of them.

--tune FILE (all-reduce only) measures ring, tree, rhd and direct (or -a's list) over the sweep,
picks the fastest out-of-place time at each size and writes the winners for this transport and
world size into FILE, the selection table the communicator compiles in
(tuning/allreduce.txt; bench/tune.sh runs it for every transport and world size).
Entries of other transports and world sizes in FILE are kept.

CUDA tensors (--config=cuda builds only; a plain build refuses these flags with exit status 2):
--device cuda puts every buffer on GPU LOCAL_RANK % (GPUs on the host), so several ranks may share
one GPU. The calls go where ProcessGroup::CommFor sends that device: with -t auto, NCCL when every
rank has its own GPU, else the host transport with the tensors staged through pinned host memory;
with -t shm|tcp|mpi always that transport, staged. -t nccl means --device cuda with NCCL required
(an error when it cannot be set up); there -a takes native (NCCL's own collectives), ring, tree and
rhd (braid's programs on CUDA streams over ncclSend/ncclRecv with braid's reduction kernels), auto
(native). The check (-c 1) fills and
compares host copies of the buffers, copied to the GPU before the call and back after it; the
timed calls touch only device memory. The per-rank reductions of times and #wrong go over the CPU
communicator.

Flags that differ from nccl-tests: -t is the transport (nccl-tests: thread count), -a the
algorithm list (nccl-tests: how times are averaged), -C the collective (nccl-tests: report CPU
time). -g is accepted with the value 1 only (one device per process).

Long sweeps show one progress line on stderr when it is a terminal.

Exit status: 0 all checks passed; 1 a collective failed or a check found wrong values; 2 a bad
flag or value (one line on stderr).
)";

namespace {

// Where the buffers live and what moves them.
std::vector<Flag> PlacementFlags(BraidOptions* o) {
  std::vector<Flag> flags;
  flags.push_back({'t', "transport", "auto|mpi|shm|tcp|nccl",
                   "the process group's transport (default auto: mpi under mpirun, else shm when all ranks share "
                   "this host, else tcp); nccl: CUDA buffers on streams, NCCL point to point and collectives (--config=cuda builds)",
                   [o](absl::string_view v) -> absl::Status {
                     const std::string name = absl::AsciiStrToLower(v);
                     if (name != "auto" && name != "mpi" && name != "shm" && name != "tcp" && name != "nccl") {
                       return absl::InvalidArgumentError(absl::StrCat(
                           "unknown transport \"", v,
                           "\" (auto, mpi, shm, tcp, nccl; nccl-tests' -t thread count is not a braid flag)"));
                     }
                     if (name == "nccl" && !CudaCompiledIn()) {
                       return absl::InvalidArgumentError(
                           "-t nccl needs a braid_bench built with --config=cuda (this one was built without CUDA)");
                     }
                     o->transport = name;
                     if (name == "nccl") o->cuda = true;
                     return absl::OkStatus();
                   }});
  flags.push_back({0, "device", "cpu|cuda",
                   "where the buffers live (default cpu); cuda: GPU LOCAL_RANK % GPUs, through NCCL or staged "
                   "through host memory (--config=cuda builds)",
                   [o](absl::string_view v) -> absl::Status {
                     if (v != "cpu" && v != "cuda") {
                       return absl::InvalidArgumentError(absl::StrCat("unknown device \"", v, "\" (cpu or cuda)"));
                     }
                     if (v == "cuda" && !CudaCompiledIn()) {
                       return absl::InvalidArgumentError(
                           "--device cuda needs a braid_bench built with --config=cuda (this one was built without "
                           "CUDA)");
                     }
                     o->cuda = v == "cuda";
                     return absl::OkStatus();
                   }});
  flags.push_back({'g', "ngpus", "1", "accepted for nccl-tests command lines: one device per process, so only 1",
                   [](absl::string_view v) -> absl::Status {
                     if (v != "1") return absl::InvalidArgumentError("braid runs one device per process: only -g 1");
                     return absl::OkStatus();
                   }});
  return flags;
}

}  // namespace

std::vector<Flag> BraidFlags(BraidOptions* o) {
  std::vector<Flag> flags = CommonFlags(&o->common);
  flags.push_back({'a', "algo", "ALGO[,ALGO...]",
                   "all-reduce: ring, tree, rhd, one-shot, window (shm), peer-access (shm), direct (the best of "
                   "those three for the transport), native (the transport's engine: MPI_Allreduce over mpi), auto "
                   "(default); reduce-scatter, all-gather, all-to-all: auto, native or peer-access (shm); the "
                   "others: auto or native; one table section each",
                   [o](absl::string_view v) -> absl::Status {
                     o->algorithms.clear();
                     o->algorithms_given = true;
                     for (absl::string_view name : absl::StrSplit(v, ',')) {
                       absl::StatusOr<Algorithm> algorithm = ParseAlgorithm(absl::StripAsciiWhitespace(name));
                       if (!algorithm.ok()) return algorithm.status();
                       o->algorithms.push_back(*algorithm);
                     }
                     return absl::OkStatus();
                   }});
  flags.push_back({'z', "blocking", "0|1",
                   "1: wait for each iteration before issuing the next; 0 (default): issue all, wait on the last",
                   [o](absl::string_view v) -> absl::Status {
                     absl::StatusOr<int64_t> n = ParseInt(v, 0, 1);
                     if (!n.ok()) return n.status();
                     o->blocking = *n == 1;
                     return absl::OkStatus();
                   }});
  flags.push_back({'C', "collective", "NAME",
                   "allreduce (default), reducescatter, allgather, broadcast, reduce, alltoall, sendrecv",
                   [o](absl::string_view v) -> absl::Status {
                     absl::StatusOr<Collective> collective = ParseCollective(v);
                     if (!collective.ok()) return collective.status();
                     o->collective = *collective;
                     return absl::OkStatus();
                   }});
  flags.push_back({'r', "root", "RANK", "root of broadcast and reduce (default 0)",
                   [o](absl::string_view v) -> absl::Status {
                     absl::StatusOr<int64_t> n = ParseInt(v, 0, 1 << 20);
                     if (!n.ok()) return n.status();
                     o->root = static_cast<int>(*n);
                     return absl::OkStatus();
                   }});
  flags.push_back({0, "memory", "mappable|braid|caller",
                   "CPU buffers: memory the peers map (default), braid's own, or the caller's own pages (as torch's)",
                   [o](absl::string_view v) -> absl::Status {
                     const std::string memory = absl::AsciiStrToLower(v);
                     if (memory != "mappable" && memory != "braid" && memory != "caller") {
                       return absl::InvalidArgumentError("mappable, braid or caller");
                     }
                     o->memory = memory;
                     return absl::OkStatus();
                   }});
  for (Flag& flag : PlacementFlags(o)) flags.push_back(std::move(flag));
  flags.push_back({0, "tune", "FILE",
                   "all-reduce: find the fastest of ring, tree, rhd, direct (or -a's) at each size and write them into the "
                   "selection table FILE for this transport and world size",
                   [o](absl::string_view v) -> absl::Status {
                     if (v.empty()) return absl::InvalidArgumentError("needs a file name");
                     o->tune_path = std::string(v);
                     return absl::OkStatus();
                   }});
  return flags;
}

absl::Status ValidateBraid(BraidOptions& o) {
  if (o.transport == "nccl") {
    if (!o.cuda) return absl::InvalidArgumentError("-t nccl runs on CUDA buffers: drop --device cpu");
    for (Algorithm a : o.algorithms) {
      const bool on_device = a == Algorithm::kAuto || a == Algorithm::kNative || a == Algorithm::kRing ||
                             a == Algorithm::kTree || a == Algorithm::kRhd;
      if (!on_device) {
        return absl::InvalidArgumentError(absl::StrCat(
            "-t nccl runs ring, tree, rhd (braid's, on CUDA streams over ncclSend/ncclRecv), native or auto, not ",
            AlgorithmName(a)));
      }
    }
  }
  if (!o.tune_path.empty()) {
    if (o.collective != Collective::kAllReduce) {
      return absl::InvalidArgumentError("--tune measures all-reduce only: drop -C or give -C allreduce");
    }
    if (!o.algorithms_given) {
      o.algorithms = {Algorithm::kRing, Algorithm::kTree, Algorithm::kRhd, Algorithm::kDirect};
    }
    for (Algorithm a : o.algorithms) {
      if (a == Algorithm::kAuto || a == Algorithm::kNative) {
        return absl::InvalidArgumentError(absl::StrCat("--tune chooses among braid's own algorithms (ring, tree, "
                                                       "rhd, direct); -a has ", AlgorithmName(a)));
      }
    }
  }
  if (o.collective != Collective::kAllReduce) {
    for (Algorithm a : o.algorithms) {
      if (o.collective == Collective::kSendRecv && a != Algorithm::kAuto) {
        return absl::InvalidArgumentError(
            absl::StrCat("-a/--algo: sendrecv is braid's own point-to-point: give auto, not ", AlgorithmName(a)));
      }
      const bool peer_path = o.collective == Collective::kReduceScatter || o.collective == Collective::kAllGather ||
                             o.collective == Collective::kAllToAll;
      if (a != Algorithm::kAuto && a != Algorithm::kNative && !(peer_path && a == Algorithm::kPeerAccess)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "-a/--algo: ", CollectiveName(o.collective), " takes auto or native", peer_path ? " or peer-access" : "",
            ", not ", AlgorithmName(a)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace braid::bench
