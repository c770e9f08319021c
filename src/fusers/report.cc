// The fusion report as text (inspect) and JSON (inspect --json, tests).
#include <nlohmann/json.hpp>

#include <algorithm>

#include "fusers/plan.h"

namespace fuselm::fusers {
namespace {

std::string_view status_name(ReportEntry::Status s) {
  switch (s) {
    case ReportEntry::Status::fused: return "fused";
    case ReportEntry::Status::rejected: return "rejected";
    case ReportEntry::Status::error: return "error";
  }
  return "?";
}

}  // namespace

std::string format_report(const Report& r) {
  size_t wm = 6, wf = 5;
  for (const auto& e : r.entries) {
    wm = std::max(wm, e.module.size());
    wf = std::max(wf, e.fuser.size());
  }
  std::string s = fmt::format("{:<{}}  {:<{}}  {:<8}  {}\n", "module", wm, "fuser", wf, "status", "detail");
  for (const auto& e : r.entries)
    s += fmt::format("{:<{}}  {:<{}}  {:<8}  {}\n", e.module, wm, e.fuser, wf, status_name(e.status), e.detail);
  s += "\ntotals:\n";
  for (const auto& [name, t] : r.totals) {
    const bool off = std::find(r.disabled.begin(), r.disabled.end(), name) != r.disabled.end();
    if (off) s += fmt::format("  {}: disabled\n", name);
    else s += fmt::format("  {}: {} of {} modules\n", name, t.first, t.second);
  }
  s += fmt::format("graph: {} nodes -> {} nodes; match cache: {} hits, {} misses\n", r.nodes_before, r.nodes_after,
                   r.cache_hits, r.cache_misses);
  for (const auto& e : r.errors) s += "error: " + e + "\n";
  return s;
}

nlohmann::json report_json(const Report& r) {
  nlohmann::json j;
  j["modules"] = nlohmann::json::array();
  for (const auto& e : r.entries)
    j["modules"].push_back({{"module", e.module},
                            {"class", e.cls},
                            {"fuser", e.fuser},
                            {"status", status_name(e.status)},
                            {"detail", e.detail},
                            {"cached", e.cached}});
  j["totals"] = nlohmann::json::object();
  for (const auto& [name, t] : r.totals) j["totals"][name] = {{"applied", t.first}, {"candidates", t.second}};
  j["disabled"] = r.disabled;
  j["errors"] = r.errors;
  j["nodes_before"] = r.nodes_before;
  j["nodes_after"] = r.nodes_after;
  j["cache"] = {{"hits", r.cache_hits}, {"misses", r.cache_misses}};
  return j;
}

}  // namespace fuselm::fusers
