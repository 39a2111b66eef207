#include "base/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/env.h"
#include "base/launch_env.h"
#include "base/status.h"

namespace braid {
namespace {

BRAID_ENV_KNOB(kSecretKnob, launch_env::kJobSecret, "",
               "The job's shared secret: the store and the tcp transport admit only processes that know it.");
BRAID_ENV_KNOB(kSecretFileKnob, "BRAID_JOB_SECRET_FILE", "",
               "A file holding the job's secret (for multi-node jobs); used when BRAID_JOB_SECRET is unset.");

absl::StatusOr<std::string> RandomBytes(size_t n) {
  std::string bytes(n, '\0');
  size_t filled = 0;
  while (filled < n) {
    const ssize_t got = getrandom(bytes.data() + filled, n - filled, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoStatus(errno, "getrandom");
    filled += static_cast<size_t>(got);
  }
  return bytes;
}

}  // namespace

absl::StatusOr<JobSecret> JobSecret::FromEnv() {
  if (kSecretKnob.IsSet() && !kSecretKnob.String().empty()) return JobSecret(kSecretKnob.String());
  const std::string path = kSecretFileKnob.String();
  if (path.empty()) return JobSecret();
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("BRAID_JOB_SECRET_FILE: cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  std::string secret(absl::StripTrailingAsciiWhitespace(text.str()));
  if (secret.empty()) return absl::InvalidArgumentError(absl::StrCat("BRAID_JOB_SECRET_FILE: ", path, " is empty"));
  return JobSecret(std::move(secret));
}

absl::StatusOr<std::string> JobSecret::Generate() {
  BRAID_ASSIGN_OR_RETURN(std::string bytes, RandomBytes(32));
  return absl::BytesToHexString(bytes);
}

absl::StatusOr<std::string> JobSecret::Nonce() { return RandomBytes(kNonceBytes); }

std::string JobSecret::Prove(absl::string_view role, absl::string_view first, absl::string_view second) const {
  const std::string message = absl::StrCat(role, std::string(1, '\0'), first, second);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  return std::string(reinterpret_cast<const char*>(digest), length);
}

bool JobSecret::Verify(absl::string_view role, absl::string_view first, absl::string_view second,
                       absl::string_view proof) const {
  const std::string expected = Prove(role, first, second);
  return proof.size() == expected.size() && CRYPTO_memcmp(proof.data(), expected.data(), expected.size()) == 0;
}

}  // namespace braid
