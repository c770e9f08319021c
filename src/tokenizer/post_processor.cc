#include "tokenizer/post_processor.h"

namespace fuselm::tokenizer {
namespace {

class ByteLevelPost final : public PostProcessor {
 public:
  // Only trims offsets in HF; ids are unchanged.
  void process(std::vector<std::uint32_t>&, bool) const override {}
};

// The "single" template: a list of pieces, each the input sequence or a special token's ids.
class TemplatePost final : public PostProcessor {
 public:
  struct Item {
    bool is_sequence;
    std::vector<std::uint32_t> ids;  // the special token's ids
  };
  explicit TemplatePost(std::vector<Item> items) : items_(std::move(items)) {}
  void process(std::vector<std::uint32_t>& ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    std::vector<std::uint32_t> out;
    out.reserve(ids.size() + items_.size());
    for (const Item& item : items_) {
      if (item.is_sequence) out.insert(out.end(), ids.begin(), ids.end());
      else out.insert(out.end(), item.ids.begin(), item.ids.end());
    }
    ids = std::move(out);
  }

 private:
  std::vector<Item> items_;
};

class SequencePost final : public PostProcessor {
 public:
  explicit SequencePost(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void process(std::vector<std::uint32_t>& ids, bool add_special_tokens) const override {
    for (const auto& step : steps_) step->process(ids, add_special_tokens);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

std::unique_ptr<PostProcessor> make_template(const Field& spec) {
  const Field single = spec["single"];
  const Field specials = spec["special_tokens"];
  std::vector<TemplatePost::Item> items;
  for (std::size_t i = 0; i < single.size(); ++i) {
    const Field piece = single.at(i);
    if (auto seq = piece.get("Sequence")) {
      const Field which = (*seq)["id"];
      if (which.str() != "A") which.fail("must be \"A\" in a single-sequence template");
      items.push_back({true, {}});
    } else if (auto tok = piece.get("SpecialToken")) {
      const Field id = (*tok)["id"];
      auto entry = specials.get(id.str());
      if (!entry) id.fail("'" + id.str() + "' is not in post_processor.special_tokens");
      const Field ids = (*entry)["ids"];
      TemplatePost::Item item{false, {}};
      for (std::size_t k = 0; k < ids.size(); ++k) item.ids.push_back(ids.at(k).u32());
      items.push_back(std::move(item));
    } else {
      piece.fail("must hold \"Sequence\" or \"SpecialToken\"");
    }
  }
  return std::make_unique<TemplatePost>(std::move(items));
}

// BertProcessing and RobertaProcessing: "cls" and "sep" are [token, id] pairs; one sequence
// becomes cls A sep.
std::unique_ptr<PostProcessor> make_cls_sep(const Field& spec) {
  auto id_of = [](const Field& pair) {
    if (!pair.is_array() || pair.size() != 2 || !pair.at(0).is_string()) {
      pair.fail("must be a pair [token, id]");
    }
    return pair.at(1).u32();
  };
  std::vector<TemplatePost::Item> items;
  items.push_back({false, {id_of(spec["cls"])}});
  items.push_back({true, {}});
  items.push_back({false, {id_of(spec["sep"])}});
  return std::make_unique<TemplatePost>(std::move(items));
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const Field& spec) {
  const Field type = spec["type"];
  const std::string& t = type.str();
  if (t == "ByteLevel") return std::make_unique<ByteLevelPost>();
  if (t == "TemplateProcessing") return make_template(spec);
  if (t == "BertProcessing" || t == "RobertaProcessing") return make_cls_sep(spec);
  if (t == "Sequence") {
    const Field list = spec["processors"];
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (std::size_t i = 0; i < list.size(); ++i) steps.push_back(make_post_processor(list.at(i)));
    return std::make_unique<SequencePost>(std::move(steps));
  }
  type.unsupported(t);
}

}  // namespace fuselm::tokenizer
