#include <algorithm>

#include "sim/engine.h"

namespace braid::sim::engine_internal {

double Engine::Send(int from, int to, uint32_t channel, uint64_t bytes, double time) {
  const Network::Route route = network_.RouteOf(from, to);
  // Hop by hop: a hop starts once it is free and the previous hop has
  // started (the switch buffers what waits), and cannot end before the
  // previous hop has delivered the last byte.
  double start = time + cluster_.message_overhead_s;
  double end = start;
  double left = 0;
  for (int h = 0; h < route.hops; ++h) {
    const int link = route.links[h];
    start = std::max(start, link_free_[link]);
    end = std::max(start + Hold(link, bytes, start), end);
    link_free_[link] = end;
    if (h == 0) left = end;
  }
  const double arrival = end + route.latency_s;
  ++result_.messages;
  result_.bytes_sent += bytes;
  auto it = fifos_.find(Key(to, from, channel));
  if (it != fifos_.end() && it->second.waiters) {
    Fifo& fifo = it->second;
    const Fifo::Entry waiter = fifo.entries[fifo.head++];
    if (fifo.head == fifo.entries.size()) fifos_.erase(it);
    Slot& s = states_[waiter.rank].frames[waiter.depth].slots[waiter.slot];
    s.done = std::max(s.done, arrival);
    if (--s.pending == 0) Schedule(s.done, waiter.rank, waiter.depth, waiter.slot);
  } else {
    Fifo& fifo = fifos_[Key(to, from, channel)];
    fifo.entries.push_back({arrival, 0, 0, 0});
  }
  return left;
}

double Engine::Hold(int link, uint64_t bytes, double start) {
  const double rate = network_.link_bandwidth(link);
  const double burst = network_.link_burst(link);
  if (burst == 0) return bytes / rate;
  // A token bucket: tokens come at the rate up to the burst; bytes covered
  // by tokens pass at the peak rate, the rest at the rate.
  LinkBucket& bucket = buckets_[link];
  const double tokens = std::min(burst, bucket.tokens + (start - bucket.since) * rate);
  const double covered = std::min<double>(tokens, bytes);
  const double seconds = covered / cluster_.nic_peak_bandwidth + (bytes - covered) / rate;
  bucket.tokens = tokens - covered;
  bucket.since = start + seconds;
  return seconds;
}

double Engine::Receive(uint32_t rank, int depth, int slot, int from, uint32_t channel) {
  auto it = fifos_.find(Key(rank, from, channel));
  if (it != fifos_.end() && !it->second.waiters) {
    Fifo& fifo = it->second;
    const double arrival = fifo.entries[fifo.head++].arrival;
    if (fifo.head == fifo.entries.size()) fifos_.erase(it);
    return arrival;
  }
  Fifo& fifo = fifos_[Key(rank, from, channel)];
  fifo.waiters = true;
  fifo.entries.push_back({0, rank, static_cast<uint16_t>(depth), static_cast<uint16_t>(slot)});
  return -1;
}

}  // namespace braid::sim::engine_internal
