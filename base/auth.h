// JobSecret: the job's shared secret, and the HMAC-SHA256 challenge-response
// that the store and the tcp transport use to admit only processes that know
// it. The secret never crosses the wire: each side sends a fresh random nonce
// and proves knowledge by an HMAC over both nonces and its role, so a
// recorded exchange cannot be replayed and neither side can be impersonated.
//
// Where the secret comes from (FromEnv): BRAID_JOB_SECRET (the secret itself),
// or BRAID_JOB_SECRET_FILE (a file holding it; trailing whitespace ignored).
// braidrun creates a random one per job and hands it to its workers; a
// multi-node job needs the same secret on every node (set one of the two).
// Neither set: an empty secret, and authentication is off.
#ifndef BRAID_BASE_AUTH_H_
#define BRAID_BASE_AUTH_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace braid {

class JobSecret {
 public:
  static constexpr size_t kNonceBytes = 32;
  static constexpr size_t kProofBytes = 32;  // SHA-256

  JobSecret() = default;  // none: authentication off
  explicit JobSecret(std::string secret) : secret_(std::move(secret)) {}

  // kInvalidArgument for an unreadable or empty secret file, naming it.
  static absl::StatusOr<JobSecret> FromEnv();
  // 32 random bytes from the kernel, hex-encoded: what braidrun hands out.
  static absl::StatusOr<std::string> Generate();
  // kNonceBytes from the kernel's random source.
  static absl::StatusOr<std::string> Nonce();

  bool enabled() const { return !secret_.empty(); }
  // HMAC-SHA256(secret, role | 0 | first | second): kProofBytes.
  std::string Prove(absl::string_view role, absl::string_view first, absl::string_view second) const;
  // Constant-time comparison against Prove(role, first, second).
  bool Verify(absl::string_view role, absl::string_view first, absl::string_view second,
              absl::string_view proof) const;

 private:
  std::string secret_;
};

}  // namespace braid

#endif  // BRAID_BASE_AUTH_H_
