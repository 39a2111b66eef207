// The agreement check: do all ranks issue the same collective? Each rank
// contributes the header its collective's frames would carry (kind, seq,
// count, dtype, op, root); when any differs, every rank fails with every
// rank's call, naming the check that found it.
//
// braid's algorithms need no check (their frames carry the header and a
// receiver compares it); an engine's own collectives (MPI, NCCL) carry none,
// so the communicator checks before each of them by default. One knob,
// BRAID_DEBUG, says when it runs:
//   (unset), info  before each native collective
//   detail         before every collective (one extra small all-gather each)
//   off            never (native collectives then trust the callers)
// (TORCH_DISTRIBUTED_DEBUG's words, any case.)
#ifndef BRAID_COLLECTIVES_AGREEMENT_H_
#define BRAID_COLLECTIVES_AGREEMENT_H_

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/transport/frame.h"

namespace braid {

enum class AgreementChecks { kNative, kEvery, kOff };

// BRAID_DEBUG's value; kInvalidArgument for one it does not know.
absl::StatusOr<AgreementChecks> AgreementChecksFromEnv();

// Gathers every rank's `mine` into `all` (rank order): over braid's own ring
// on a host transport, or the engine's all-gather.
using HeaderGather = absl::FunctionRef<absl::Status(const FrameHeader& mine, absl::Span<FrameHeader> all)>;

// Collective: every rank of `size` calls it for the same sequence number.
// OK when every rank's header for `args` matches this rank's; otherwise
// kInvalidArgument "rank R: mismatched collective (<check>: the ranks issued
// different collectives): rank 0 issued ...; rank 1 issued ...".
absl::Status CheckAgreement(int rank, int size, const CollectiveArgs& args, const char* check, HeaderGather gather);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_AGREEMENT_H_
