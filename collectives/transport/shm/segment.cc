#include "collectives/transport/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/fd.h"
#include "base/status.h"

namespace braid::shm_internal {
namespace {

absl::StatusOr<std::byte*> Map(int fd, size_t bytes) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return ErrnoStatus(errno, "mmap of a shared-memory segment");
  return static_cast<std::byte*>(base);
}

}  // namespace

absl::StatusOr<ShmSegment> ShmSegment::Create(std::string name, size_t bytes) {
  UniqueFd fd(shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("shm_open(", name, ")"));
  ShmSegment segment;
  segment.name_ = std::move(name);  // unlinked by the destructor from here on
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) < 0) {
    return ErrnoStatus(errno, absl::StrCat("ftruncate(", segment.name_, ", ", bytes, ") (is /dev/shm big enough?)"));
  }
  BRAID_ASSIGN_OR_RETURN(segment.base_, Map(fd.get(), bytes));
  segment.bytes_ = bytes;
  std::memset(segment.base_, 0, bytes);
  return segment;
}

absl::StatusOr<ShmSegment> ShmSegment::Open(const std::string& name, size_t bytes) {
  UniqueFd fd(shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("shm_open(", name, ")"));
  ShmSegment segment;
  BRAID_ASSIGN_OR_RETURN(segment.base_, Map(fd.get(), bytes));
  segment.bytes_ = bytes;
  return segment;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), bytes_(std::exchange(other.bytes_, 0)),
      name_(std::move(other.name_)) {
  other.name_.clear();
}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    Release();
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    name_ = std::move(other.name_);
    other.name_.clear();
  }
  return *this;
}

ShmSegment::~ShmSegment() { Release(); }

void ShmSegment::Unlink() {
  if (name_.empty()) return;
  shm_unlink(name_.c_str());
  name_.clear();
}

void ShmSegment::Release() {
  if (base_ != nullptr) munmap(base_, bytes_);
  base_ = nullptr;
  bytes_ = 0;
  Unlink();
}

}  // namespace braid::shm_internal
