// fuselm.moe_route: the router of an MoE block as one op (inserted by src/fusers/moe.cc).
//   fuselm.moe_route(x [..., H], gate_weight [E, H], correction_bias [E]?, scoring, groups,
//                    topk_group, group_score, top_k, renorm, renorm_eps, scaling)
//     -> (weights [T, top_k] f32, ids [T, top_k] i64), T = rows of x
//   scoring: softmax | sigmoid | softmax_of_topk; group_score: none | top2_sum | max
//   (kernels/cpu/moe_route.h has the semantics; the gate runs through kernels::linear in fp32)
#include <string>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/moe_route.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

std::string str_arg(OpCall& c, const char* name) {
  const Value& v = c.arg(name);
  if (v.kind != Value::Kind::string || !v.s) c.fail(std::string(name) + " is not a string");
  return v.s;
}

void moe_route(OpCall& c) {
  const Tensor& x = c.tensor("input");
  const Tensor& w = c.tensor("gate_weight");
  if (w.ndim != 2 || x.ndim < 1 || x.shape[x.ndim - 1] != w.shape[1])
    c.fail("gate weight " + w.describe() + " does not match input " + x.describe());
  if (!w.is_contiguous()) c.fail("gate weight " + w.describe() + " is not contiguous");
  kernels::MoeRouteArgs a;
  const std::string scoring = str_arg(c, "scoring"), group_score = str_arg(c, "group_score");
  if (scoring == "softmax") a.scoring = kernels::MoeScoring::softmax;
  else if (scoring == "sigmoid") a.scoring = kernels::MoeScoring::sigmoid;
  else if (scoring == "softmax_of_topk") a.scoring = kernels::MoeScoring::softmax_of_topk;
  else c.fail("scoring '" + scoring + "' is none of softmax, sigmoid, softmax_of_topk");
  if (group_score == "none") a.group_score = kernels::MoeGroupScore::none;
  else if (group_score == "top2_sum") a.group_score = kernels::MoeGroupScore::top2_sum;
  else if (group_score == "max") a.group_score = kernels::MoeGroupScore::max;
  else c.fail("group_score '" + group_score + "' is none of none, top2_sum, max");
  const int64_t h = w.shape[1], e = w.shape[0];
  a.t = h ? x.numel() / h : 0;
  a.e = e;
  a.groups = c.integer("groups");
  a.topk_group = c.integer("topk_group");
  a.k = c.integer("top_k");
  a.renorm = c.boolean("renorm");
  a.renorm_eps = static_cast<float>(c.real("renorm_eps"));
  a.scaling = static_cast<float>(c.real("scaling"));

  Scratch sx(c.ctx), sb(c.ctx), sl(c.ctx);
  Tensor xc = contiguous_as(x, DType::f32, sx);
  if (c.has("correction_bias")) {
    Tensor b = contiguous_as(c.tensor("correction_bias"), DType::f32, sb);
    if (b.numel() != e) c.fail("correction bias " + b.describe() + " does not have one value per expert");
    a.correction = b.ptr<float>();
  }
  Tensor logits = sl.alloc(DType::f32, std::initializer_list<int64_t>{a.t, e});
  kernels::LinearArgs lin;
  lin.x = xc.ptr<float>();
  lin.w = w.data;
  lin.w_dtype = weight_storage(c, w, "gate weight");
  lin.y = logits.ptr<float>();
  lin.m = a.t;
  lin.n = e;
  lin.k = h;
  kernels::linear(lin);
  a.logits = logits.ptr<float>();
  Tensor weights = c.alloc(DType::f32, {a.t, a.k});
  Tensor ids = c.alloc(DType::i64, {a.t, a.k});
  a.weights = weights.ptr<float>();
  a.ids = ids.ptr<int64_t>();
  try {
    kernels::moe_route(a);
  } catch (const std::invalid_argument& err) {
    c.fail(err.what());
  }
  c.out.kind = Value::Kind::list;
  c.out.list.resize(2);
  c.out.list[0].set_tensor(weights);
  c.out.list[1].set_tensor(ids);
}

}  // namespace

void register_moe_route_ops(OpRegistry& r) { r.add("fuselm.moe_route.default", moe_route); }

}  // namespace fuselm::runtime::ops
