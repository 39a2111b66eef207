// The selector's compiled-in tuning rows: reads tuning/allreduce.txt with
// the one parser of its format (bench/tuning_table.h) and prints a C++ row
// {"<transport>", <world size>, <max bytes>, "<algorithm>"}, per range, under
// a comment naming the group's origin. //collectives:allreduce_tuning_inc
// runs it at build time; a line it cannot read fails the build.
//
//   tuning_inc FILE > allreduce_tuning.inc
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "bench/tuning_table.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tuning_inc FILE\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "tuning_inc: cannot read %s\n", argv[1]);
    return 1;
  }
  std::stringstream text;
  text << in.rdbuf();
  const absl::StatusOr<std::vector<braid::bench::TuningGroup>> groups = braid::bench::ParseTuningTable(text.str());
  if (!groups.ok()) {
    std::fprintf(stderr, "%s: %s\n", argv[1], std::string(groups.status().message()).c_str());
    return 1;
  }
  for (const braid::bench::TuningGroup& group : *groups) {
    std::printf("// %s n=%d: %s\n", group.transport.c_str(), group.world_size, group.origin.c_str());
    for (const braid::bench::TuningRange& range : group.ranges) {
      std::printf("{\"%s\", %d, %llu, \"%s\"},\n", group.transport.c_str(), group.world_size,
                  static_cast<unsigned long long>(range.max_bytes), range.algorithm.c_str());
    }
  }
  return 0;
}
