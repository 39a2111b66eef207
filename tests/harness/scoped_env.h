// ScopedEnv: clears some environment variables for a test and restores the
// test process's own values afterwards. Main thread only (setenv is not
// thread-safe); forked ranks inherit what is set when they start.
#ifndef BRAID_TESTS_HARNESS_SCOPED_ENV_H_
#define BRAID_TESTS_HARNESS_SCOPED_ENV_H_

#include <map>
#include <string>
#include <vector>

namespace braid::testing {

class ScopedEnv {
 public:
  // Unsets every name in `names`, remembering the values they had.
  explicit ScopedEnv(std::vector<std::string> names);
  // Puts every name back as it was (set to its old value, or unset).
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  void Set(const char* name, const std::string& value);

 private:
  const std::vector<std::string> names_;
  std::map<std::string, std::string> saved_;
};

}  // namespace braid::testing

#endif  // BRAID_TESTS_HARNESS_SCOPED_ENV_H_
