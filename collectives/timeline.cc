#include "collectives/timeline.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/mutex.h"

namespace braid {
namespace {

BRAID_ENV_KNOB(kTimelineKnob, "BRAID_TIMELINE", "",
               "Write a Chrome-trace/Perfetto JSON of every collective (and the reducer's buckets) per rank: "
               "path.json -> path.rank<R>.json; dir/ -> dir/rank<R>.json.");
BRAID_ENV_KNOB(kTimelineEventsKnob, "BRAID_TIMELINE_EVENTS", "1000000",
               "At most this many timeline events are kept per communicator; later ones are dropped (and counted).");

std::string Quote(absl::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

const char* TrackName(Timeline::Track track) {
  switch (track) {
    case Timeline::Track::kCollectives: return "collectives";
    case Timeline::Track::kBuckets: return "reducer buckets";
    case Timeline::Track::kBackward: return "backward";
  }
  return "?";
}

// Paths handed out in this process, so two communicators of one rank do not share a file.
absl::Mutex paths_mu;
std::map<std::string, int>& UsedPaths() ABSL_EXCLUSIVE_LOCKS_REQUIRED(paths_mu) {
  static auto* used = new std::map<std::string, int>();
  return *used;
}

}  // namespace

std::string Timeline::PathFor(const std::string& spec, int rank) {
  struct stat st;
  if (absl::EndsWith(spec, "/") || (stat(spec.c_str(), &st) == 0 && S_ISDIR(st.st_mode))) {
    return absl::StrCat(spec, absl::EndsWith(spec, "/") ? "" : "/", "rank", rank, ".json");
  }
  if (absl::EndsWith(spec, ".json")) {
    return absl::StrCat(spec.substr(0, spec.size() - 5), ".rank", rank, ".json");
  }
  return absl::StrCat(spec, ".rank", rank, ".json");
}

std::unique_ptr<Timeline> Timeline::FromEnv(int rank, int size, const std::string& transport) {
  const std::string spec = kTimelineKnob.String();
  if (spec.empty()) return nullptr;
  std::string path = PathFor(spec, rank);
  {
    MutexLock lock(&paths_mu);
    const int k = UsedPaths()[path]++;
    if (k > 0) path = absl::StrCat(path.substr(0, path.size() - 5), ".", k, ".json");
  }
  absl::StatusOr<int64_t> max_events = kTimelineEventsKnob.Int();
  if (!max_events.ok()) BRAID_LOG(WARNING) << max_events.status() << "; keeping 1000000 timeline events";
  return std::make_unique<Timeline>(path, rank, size, transport,
                                    max_events.ok() && *max_events > 0 ? static_cast<size_t>(*max_events) : 1000000);
}

Timeline::Timeline(std::string path, int rank, int size, std::string transport, size_t max_events)
    : path_(std::move(path)), rank_(rank), size_(size), transport_(std::move(transport)), max_events_(max_events) {}

Timeline::~Timeline() {
  const absl::Status status = Write();
  if (!status.ok()) BRAID_LOG(ERROR) << "timeline: " << status;
}

void Timeline::Span(absl::string_view name, Track track, absl::Time start, absl::Time end, std::string args) {
  const int64_t ts = absl::ToUnixMicros(start);
  const int64_t dur = std::max<int64_t>(0, absl::ToUnixMicros(end) - ts);
  MutexLock lock(&mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(Event{std::string(name), track, 'X', ts, dur, std::move(args)});
}

void Timeline::Collective(const CollectiveArgs& args, const char* algorithm, size_t bytes, absl::Time queued,
                          absl::Time start, absl::Time end, bool ok) {
  Span(absl::StrCat(CollectiveKindName(args.kind), " ", algorithm), Track::kCollectives, start, end,
       absl::StrCat("\"seq\": ", args.seq, ", \"bytes\": ", bytes, ", \"count\": ", args.count, ", \"dtype\": \"",
                    DTypeName(args.dtype), "\", \"op\": \"", ReduceOpName(args.op), "\", \"root\": ", args.root,
                    ", \"algorithm\": \"", algorithm, "\", \"queued_us\": ", absl::ToInt64Microseconds(start - queued),
                    ", \"ok\": ", ok ? "true" : "false"));
}

void Timeline::Instant(absl::string_view name, Track track, absl::Time at, std::string args) {
  MutexLock lock(&mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(Event{std::string(name), track, 'i', absl::ToUnixMicros(at), 0, std::move(args)});
}

absl::Status Timeline::Write() const {
  std::string out = "{\"traceEvents\": [\n";
  absl::StrAppend(&out, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": ", rank_,
                  ", \"tid\": 0, \"args\": {\"name\": ", Quote(absl::StrCat("rank ", rank_, " (", transport_, ")")),
                  "}},\n");
  absl::StrAppend(&out, "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": ", rank_,
                  ", \"tid\": 0, \"args\": {\"sort_index\": ", rank_, "}}");
  for (Track track : {Track::kCollectives, Track::kBuckets, Track::kBackward}) {
    absl::StrAppend(&out, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": ", rank_,
                    ", \"tid\": ", static_cast<int>(track), ", \"args\": {\"name\": ", Quote(TrackName(track)), "}}");
  }
  uint64_t dropped = 0;
  {
    MutexLock lock(&mu_);
    dropped = dropped_;
    for (const Event& e : events_) {
      absl::StrAppend(&out, ",\n{\"name\": ", Quote(e.name), ", \"cat\": ", Quote(TrackName(e.track)),
                      ", \"ph\": \"", std::string(1, e.phase), "\", \"pid\": ", rank_,
                      ", \"tid\": ", static_cast<int>(e.track), ", \"ts\": ", e.ts_us);
      if (e.phase == 'X') absl::StrAppend(&out, ", \"dur\": ", e.dur_us);
      if (e.phase == 'i') absl::StrAppend(&out, ", \"s\": \"t\"");
      absl::StrAppend(&out, ", \"args\": {", e.args, "}}");
    }
  }
  absl::StrAppend(&out, "\n], \"displayTimeUnit\": \"ms\", \"otherData\": {\"rank\": ", rank_, ", \"world_size\": ",
                  size_, ", \"transport\": ", Quote(transport_), ", \"dropped_events\": ", dropped, "}}\n");
  // The folder may not exist yet (BRAID_TIMELINE=/tmp/new/): make it, like mkdir -p.
  for (size_t slash = path_.find('/', 1); slash != std::string::npos; slash = path_.find('/', slash + 1)) {
    ::mkdir(path_.substr(0, slash).c_str(), 0755);  // EEXIST is fine; a real failure shows at fopen
  }
  const std::string temp = absl::StrCat(path_, ".tmp");
  std::FILE* file = std::fopen(temp.c_str(), "w");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("BRAID_TIMELINE: cannot open ", temp, ": ", std::strerror(errno)));
  }
  const bool written = std::fwrite(out.data(), 1, out.size(), file) == out.size();
  if (std::fclose(file) != 0 || !written || std::rename(temp.c_str(), path_.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("BRAID_TIMELINE: writing ", path_, " failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace braid
