#pragma once
// Stop strings over streamed text: text arrives piece by piece (one token's text at a time) and a
// stop string may span pieces. Text that could still be the start of a stop string is held back;
// when one completes, the text before it is released and the rest (the stop string included) is
// dropped, as the OpenAI API has it.
#include <string>
#include <string_view>
#include <vector>

namespace fuselm::engine {

class StopMatcher {
 public:
  /// Empty strings are ignored.
  explicit StopMatcher(std::vector<std::string> stops = {});
  /// Feeds the next piece; returns the text that is now safe to emit. After a match, matched()
  /// is true and further input is ignored.
  std::string feed(std::string_view piece);
  /// The held-back text at the end of the stream (nothing after a match).
  std::string flush();
  bool matched() const { return matched_; }
  bool empty() const { return stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
};

}  // namespace fuselm::engine
