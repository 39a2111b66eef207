#include "collectives/agreement.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/env.h"
#include "base/status.h"

namespace braid {
namespace {

BRAID_ENV_KNOB(kDebugKnob, "BRAID_DEBUG", "",
               "When all ranks check that they issue the same collective: unset or info, before each native "
               "collective (MPI's, NCCL's own, whose messages carry no frame headers); detail, before every "
               "collective (one extra small all-gather each); off, never.");

}  // namespace

absl::StatusOr<AgreementChecks> AgreementChecksFromEnv() {
  // TORCH_DISTRIBUTED_DEBUG's spellings too: OFF, INFO, DETAIL, any case.
  const std::string value = absl::AsciiStrToLower(kDebugKnob.String());
  if (value.empty() || value == "info") return AgreementChecks::kNative;
  if (value == "detail") return AgreementChecks::kEvery;
  if (value == "off") return AgreementChecks::kOff;
  return absl::InvalidArgumentError(absl::StrCat("BRAID_DEBUG=\"", kDebugKnob.String(),
                                                 "\" is not one of off, info (the default) or detail"));
}

absl::Status CheckAgreement(int rank, int size, const CollectiveArgs& args, const char* check, HeaderGather gather) {
  const FrameHeader mine = CollectiveHeader(args);
  std::vector<FrameHeader> all(static_cast<size_t>(size));
  BRAID_RETURN_IF_ERROR(gather(mine, absl::MakeSpan(all)));
  bool agree = true;
  for (const FrameHeader& other : all) {
    agree = agree && other.kind == mine.kind && other.dtype == mine.dtype && other.reduce_op == mine.reduce_op &&
            other.root == mine.root && other.count == mine.count && other.seq == mine.seq;
  }
  if (agree) return absl::OkStatus();
  std::string calls;
  for (size_t r = 0; r < all.size(); ++r) {
    FrameHeader h = all[r];
    h.tag = 0;
    h.bytes = 0;
    absl::StrAppend(&calls, r == 0 ? "" : "; ", "rank ", r, " issued ", DescribeFrame(h));
  }
  return absl::InvalidArgumentError(absl::StrCat("rank ", rank, ": mismatched collective (", check,
                                                 ": the ranks issued different collectives): ", calls));
}

}  // namespace braid
