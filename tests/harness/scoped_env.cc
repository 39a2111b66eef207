#include "tests/harness/scoped_env.h"

#include <cstdlib>
#include <utility>

namespace braid::testing {

ScopedEnv::ScopedEnv(std::vector<std::string> names) : names_(std::move(names)) {
  for (const std::string& name : names_) {
    if (const char* value = std::getenv(name.c_str())) saved_[name] = value;
    ::unsetenv(name.c_str());
  }
}

ScopedEnv::~ScopedEnv() {
  for (const std::string& name : names_) {
    auto it = saved_.find(name);
    if (it == saved_.end()) {
      ::unsetenv(name.c_str());
    } else {
      ::setenv(name.c_str(), it->second.c_str(), 1);
    }
  }
}

void ScopedEnv::Set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

}  // namespace braid::testing
