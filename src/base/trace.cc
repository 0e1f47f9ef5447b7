#include "kiln/trace.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace kiln {

Trace::Trace() : start_(std::chrono::steady_clock::now()) {}

double Trace::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
}

void Trace::add(Event event) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(std::move(event));
}

std::vector<Trace::Event> Trace::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

std::string Trace::chrome_json() const {
  const std::vector<Event> events = this->events();
  // One thread per track, numbered in the order tracks first appear ("host" first when present).
  std::map<std::string, int> tids;
  for (const Event& e : events)
    if (e.track == "host") tids.emplace(e.track, 1);
  for (const Event& e : events) tids.emplace(e.track, static_cast<int>(tids.size()) + 1);
  nlohmann::json list = nlohmann::json::array();
  list.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "kiln"}}}});
  for (const auto& [track, tid] : tids)
    list.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"name", track}}}});
  for (const Event& e : events) {
    nlohmann::json x = {{"name", e.name},          {"cat", e.track},   {"ph", "X"},           {"pid", 1},
                        {"tid", tids.at(e.track)}, {"ts", e.start_us}, {"dur", e.duration_us}};
    if (!e.detail.empty()) x["args"] = {{"detail", e.detail}};
    list.push_back(std::move(x));
  }
  return nlohmann::json{{"traceEvents", std::move(list)}, {"displayTimeUnit", "ms"}}.dump(
      1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status Trace::write(const std::string& path) const {
  std::ofstream f(path, std::ios::binary);
  f << chrome_json();
  if (!f.flush()) return io_error("cannot write the trace to " + path);
  return Status::ok();
}

}  // namespace kiln
