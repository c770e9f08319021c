#include "server/responses_api.h"

#include <fmt/core.h>
#include <httplib.h>

#include <cstring>
#include <ctime>
#include <utility>

#include "server/api_error.h"
#include "server/field_policy.h"

namespace fuselm::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
// The request side keeps the request's key order (templates render tools and schemas as given).
using rjson = nlohmann::ordered_json;

// A string member, or `dflt` when it is missing or not a string (the callers then refuse by name).
template <class J>
std::string str_or(const J& obj, const char* key, const std::string& dflt) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->template get<std::string>() : dflt;
}

template <class J>
const J* field(const J& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

// Fields fuselm cannot honour on this route unless they carry their "off" value.
void refuse_stateful_and_unsupported(const rjson& body) {
  if (field(body, "previous_response_id"))
    throw ApiError(400, "'previous_response_id' is not supported: fuselm stores no responses; send the earlier turns in 'input'", "previous_response_id");
  if (field(body, "conversation"))
    throw ApiError(400, "'conversation' is not supported: fuselm stores no conversations; send the earlier turns in 'input'", "conversation");
  if (field(body, "prompt")) throw ApiError(400, "'prompt' (a stored prompt template) is not supported; send 'instructions' and 'input'", "prompt");
  if (const auto* b = field(body, "background"); b && *b != false) throw ApiError(400, "'background' responses are not supported", "background");
  if (const auto* t = field(body, "truncation"); t && *t != "disabled")
    throw ApiError(400, "'truncation' other than \"disabled\" is not supported (prompts are never truncated)", "truncation");
  if (const auto* i = field(body, "include"); i && !(i->is_array() && i->empty()))
    throw ApiError(400, "'include' is not supported (no extra output data is available)", "include");
  if (const auto* m = field(body, "max_tool_calls")) throw ApiError(400, "'max_tool_calls' is not supported", "max_tool_calls");
  if (const auto* r = field(body, "reasoning"); r && !(r->is_object() && !field(*r, "effort")))
    throw ApiError(400, "'reasoning.effort' is not supported (the model's template decides whether it thinks)", "reasoning.effort");
  if (const auto* t = field(body, "top_logprobs"); t && *t != 0) throw ApiError(400, "'top_logprobs' is not supported on /v1/responses", "top_logprobs");
}

// A content list's parts as chat text parts; `where` names the item for errors.
rjson content_parts(const rjson& content, const std::string& where) {
  if (content.is_string()) return content;
  if (!content.is_array()) throw ApiError(400, fmt::format("'{}.content' must be a string or a list of parts", where), where + ".content");
  rjson parts = rjson::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const rjson& p = content[j];
    const std::string at = fmt::format("{}.content[{}]", where, j);
    const std::string type = p.is_object() ? str_or(p, "type", "") : "";
    if (type == "input_text" || type == "output_text" || type == "text" || type == "refusal") {
      const char* key = type == "refusal" ? "refusal" : "text";
      if (!p.contains(key) || !p[key].is_string()) throw ApiError(400, fmt::format("'{}.{}' must be a string", at, key), at + "." + key);
      parts.push_back({{"type", "text"}, {"text", p[key]}});
    } else {
      throw ApiError(400, fmt::format("'{}.type' '{}' is not supported (text input only)", at, type), at + ".type");
    }
  }
  return parts;
}

std::string string_field(const rjson& item, const char* name, const std::string& where) {
  const auto* v = field(item, name);
  if (!v || !v->is_string()) throw ApiError(400, fmt::format("'{}.{}' must be a string", where, name), where + "." + name);
  return v->get<std::string>();
}

// Appends one input item to the chat messages.
void add_item(ordered_json& messages, const rjson& item, const std::string& where) {
  if (!item.is_object()) throw ApiError(400, fmt::format("'{}' must be an object", where), where);
  const std::string type = str_or(item, "type", item.contains("role") ? "message" : "");
  if (type == "message") {
    const std::string role = string_field(item, "role", where);
    const auto* content = field(item, "content");
    if (!content) throw ApiError(400, fmt::format("'{}.content' is required", where), where + ".content");
    messages.push_back({{"role", role}, {"content", content_parts(*content, where)}});
  } else if (type == "function_call") {
    ordered_json call = {{"id", string_field(item, "call_id", where)}, {"type", "function"},
                         {"function", {{"name", string_field(item, "name", where)}, {"arguments", string_field(item, "arguments", where)}}}};
    // A call right after an assistant message or another call is part of that turn (a model's
    // turn comes back as items: its text, then each call), as one chat message holds them.
    if (!messages.empty() && messages.back()["role"] == "assistant") {
      auto& turn = messages.back();
      if (!turn.contains("tool_calls")) turn["tool_calls"] = ordered_json::array();
      turn["tool_calls"].push_back(call);
    } else
      messages.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ordered_json::array({call})}});
  } else if (type == "function_call_output") {
    const auto* out = field(item, "output");
    if (!out) throw ApiError(400, fmt::format("'{}.output' is required", where), where + ".output");
    messages.push_back({{"role", "tool"}, {"tool_call_id", string_field(item, "call_id", where)}, {"content", content_parts(*out, where + ".output")}});
  } else if (type == "reasoning") {
    // Earlier turns' reasoning: chat templates drop it from the prompt, so the translation does too.
  } else {
    throw ApiError(400, fmt::format("'{}.type' '{}' is not supported (message, function_call, function_call_output and reasoning items are)", where, type),
                   where + ".type");
  }
}

ordered_json tools_to_chat(const rjson& tools) {
  if (!tools.is_array()) throw ApiError(400, "'tools' must be a list", "tools");
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = fmt::format("tools[{}]", i);
    const rjson& t = tools[i];
    const std::string type = t.is_object() ? str_or(t, "type", "") : "";
    if (type != "function") throw ApiError(400, fmt::format("'{}.type' '{}' is not supported (function tools only)", at, type), at + ".type");
    ordered_json f = {{"name", string_field(t, "name", at)}};
    for (const char* k : {"description", "parameters", "strict"})
      if (const auto* v = field(t, k)) f[k] = *v;
    out.push_back({{"type", "function"}, {"function", f}});
  }
  return out;
}

ordered_json tool_choice_to_chat(const rjson& tc) {
  if (tc.is_string()) return tc;
  if (tc.is_object() && str_or(tc, "type", "") == "function") return {{"type", "function"}, {"function", {{"name", string_field(tc, "name", "tool_choice")}}}};
  throw ApiError(400, "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}", "tool_choice");
}

// text.format → response_format (the chat form nests the schema under json_schema).
void text_format_to_chat(const rjson& text, ordered_json& chat) {
  if (!text.is_object()) throw ApiError(400, "'text' must be an object", "text");
  if (const auto* v = field(text, "verbosity"); v && *v != "medium") throw ApiError(400, "'text.verbosity' is not supported", "text.verbosity");
  const auto* f = field(text, "format");
  if (!f) return;
  const std::string type = f->is_object() ? str_or(*f, "type", "") : "";
  if (type == "text") return;
  if (type == "json_object") {
    chat["response_format"] = {{"type", "json_object"}};
  } else if (type == "json_schema") {
    ordered_json s = {{"name", str_or(*f, "name", "response")}};
    for (const char* k : {"schema", "strict", "description"})
      if (const auto* v = field(*f, k)) s[k] = *v;
    chat["response_format"] = {{"type", "json_schema"}, {"json_schema", s}};
  } else {
    throw ApiError(400, fmt::format("'text.format.type' '{}' is not supported (text, json_object, json_schema)", type), "text.format.type");
  }
}

}  // namespace

ordered_json responses_to_chat(const ordered_json& body) {
  refuse_stateful_and_unsupported(body);
  ordered_json chat = ordered_json::object();
  if (const auto* m = field(body, "model")) chat["model"] = *m;
  ordered_json messages = ordered_json::array();
  if (const auto* ins = field(body, "instructions")) {
    if (!ins->is_string()) throw ApiError(400, "'instructions' must be a string", "instructions");
    messages.push_back({{"role", "system"}, {"content", *ins}});
  }
  const auto* input = field(body, "input");
  if (!input) throw ApiError(400, "'input' is required", "input");
  if (input->is_string()) messages.push_back({{"role", "user"}, {"content", *input}});
  else if (input->is_array())
    for (size_t i = 0; i < input->size(); ++i) add_item(messages, (*input)[i], fmt::format("input[{}]", i));
  else
    throw ApiError(400, "'input' must be a string or a list of items", "input");
  chat["messages"] = std::move(messages);
  if (const auto* v = field(body, "max_output_tokens")) chat["max_completion_tokens"] = *v;
  for (const char* k : {"temperature", "top_p", "seed", "parallel_tool_calls", "stream"})
    if (const auto* v = field(body, k)) chat[k] = *v;
  if (const auto* t = field(body, "tools")) chat["tools"] = tools_to_chat(*t);
  if (const auto* tc = field(body, "tool_choice")) chat["tool_choice"] = tool_choice_to_chat(*tc);
  if (const auto* t = field(body, "text")) text_format_to_chat(*t, chat);
  if (chat.contains("stream") && chat["stream"] == true) chat["stream_options"] = {{"include_usage", true}};
  return chat;
}

namespace {

std::string suffix_of(const std::string& chat_id) {
  const auto dash = chat_id.rfind('-');
  return dash == std::string::npos ? chat_id : chat_id.substr(dash + 1);
}

json usage_of(const json& chat_usage) {
  if (!chat_usage.is_object()) return nullptr;
  const int64_t in = chat_usage.value("prompt_tokens", 0), out = chat_usage.value("completion_tokens", 0);
  int64_t cached = 0;
  if (auto d = chat_usage.find("prompt_tokens_details"); d != chat_usage.end() && d->is_object()) cached = d->value("cached_tokens", 0);
  return {{"input_tokens", in}, {"input_tokens_details", {{"cached_tokens", cached}}}, {"output_tokens", out},
          {"output_tokens_details", {{"reasoning_tokens", 0}}}, {"total_tokens", in + out}};
}

// The Response envelope (fields the API always has), with `request`'s settings echoed.
json envelope(const json& request, const std::string& id, int64_t created, const std::string& status, const json& model) {
  auto echo = [&](const char* k, json dflt) {
    const auto* v = field(request, k);
    return v ? *v : dflt;
  };
  json text = echo("text", json{{"format", {{"type", "text"}}}});
  return {{"id", id}, {"object", "response"}, {"created_at", created}, {"status", status}, {"error", nullptr},
          {"incomplete_details", nullptr}, {"instructions", echo("instructions", nullptr)}, {"model", model},
          {"output", json::array()}, {"parallel_tool_calls", echo("parallel_tool_calls", true)},
          {"temperature", echo("temperature", 1.0)}, {"top_p", echo("top_p", 1.0)}, {"tool_choice", echo("tool_choice", "auto")},
          {"tools", echo("tools", json::array())}, {"max_output_tokens", echo("max_output_tokens", nullptr)},
          {"previous_response_id", nullptr}, {"reasoning", nullptr}, {"store", false}, {"text", text},
          {"truncation", "disabled"}, {"metadata", echo("metadata", json::object())}, {"user", echo("user", nullptr)},
          {"usage", nullptr}};
}

json message_item(const std::string& id, const std::string& text, const std::string& status) {
  return {{"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"},
          {"content", json::array({{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}}})}};
}

json reasoning_item(const std::string& id, const std::string& text, const std::string& status) {
  return {{"type", "reasoning"}, {"id", id}, {"status", status}, {"summary", json::array()},
          {"content", json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
}

json call_item(const std::string& id, const json& call, const std::string& status) {
  const json& f = call.value("function", json::object());
  return {{"type", "function_call"}, {"id", id}, {"status", status}, {"call_id", str_or(call, "id", id)},
          {"name", str_or(f, "name", "")}, {"arguments", str_or(f, "arguments", "")}};
}

// Sets status/incomplete_details from a chat finish reason.
void finish_status(json& r, const json& finish_reason) {
  if (finish_reason == "length") {
    r["status"] = "incomplete";
    r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  } else if (finish_reason == "abort" || finish_reason == "error") {
    r["status"] = "failed";
  } else {
    r["status"] = "completed";
  }
}

}  // namespace

json chat_to_response(const json& completion, const json& request) {
  const std::string n = suffix_of(str_or(completion, "id", "0"));
  json r = envelope(request, "resp_" + n, completion.value("created", int64_t{0}), "completed", str_or(completion, "model", ""));
  const json& choice = completion.at("choices").at(0);
  const json& msg = choice.value("message", json::object());
  json& out = r["output"];
  if (auto rc = msg.find("reasoning_content"); rc != msg.end() && rc->is_string() && !rc->get<std::string>().empty())
    out.push_back(reasoning_item(fmt::format("rs_{}_{}", n, out.size()), *rc, "completed"));
  const json content = msg.value("content", json(nullptr));
  const json calls = msg.value("tool_calls", json(nullptr));
  const bool has_calls = calls.is_array() && !calls.empty();
  if (content.is_string() && (!content.get<std::string>().empty() || !has_calls))
    out.push_back(message_item(fmt::format("msg_{}_{}", n, out.size()), content, "completed"));
  if (has_calls)
    for (const auto& c : calls) out.push_back(call_item(fmt::format("fc_{}_{}", n, out.size()), c, "completed"));
  finish_status(r, choice.value("finish_reason", json(nullptr)));
  r["usage"] = usage_of(completion.value("usage", json(nullptr)));
  return r;
}

ResponsesEventStream::ResponsesEventStream(json request) : request_(std::move(request)), created_(static_cast<int64_t>(std::time(nullptr))) {}

void ResponsesEventStream::emit(const std::string& type, json fields) {
  fields["type"] = type;
  fields["sequence_number"] = sequence_++;
  out_.push_back("event: " + type + "\ndata: " + fields.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n");
}

json ResponsesEventStream::response(const std::string& status) const {
  json r = envelope(request_, "resp_" + id_, created_, status, str_or(request_, "model", ""));
  r["output"] = output_;
  return r;
}

std::vector<std::string> ResponsesEventStream::feed(const std::string& bytes) {
  buffer_ += bytes;
  out_.clear();
  for (size_t end; !ended_ && (end = buffer_.find("\n\n")) != std::string::npos;) {
    const std::string frame = buffer_.substr(0, end);
    buffer_.erase(0, end + 2);
    if (frame.rfind("data: ", 0) != 0) continue;
    const std::string payload = frame.substr(6);
    if (payload == "[DONE]") continue;
    on_chunk(json::parse(payload, nullptr, false));
  }
  return std::move(out_);
}

void ResponsesEventStream::on_chunk(const json& chunk) {
  if (!chunk.is_object()) return;
  if (auto e = chunk.find("error"); e != chunk.end()) {
    on_error(*e);
    return;
  }
  if (!started_) {
    started_ = true;
    id_ = suffix_of(str_or(chunk, "id", "0"));
    if (!request_.contains("model") || request_["model"].is_null()) request_["model"] = str_or(chunk, "model", "");
    emit("response.created", {{"response", response("in_progress")}});
    emit("response.in_progress", {{"response", response("in_progress")}});
  }
  if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) {
    usage_ = usage_of(*u);
    json r = response("completed");
    finish_status(r, finish_reason_);
    r["usage"] = usage_;
    const std::string status = r["status"];
    emit(status == "incomplete" ? "response.incomplete" : status == "failed" ? "response.failed" : "response.completed", {{"response", r}});
    ended_ = true;
    return;
  }
  const auto choices = chunk.value("choices", json::array());
  if (choices.empty()) return;
  const json& c = choices[0];
  if (auto d = c.find("delta"); d != c.end() && d->is_object()) on_delta(*d);
  if (auto f = c.find("finish_reason"); f != c.end() && !f->is_null()) on_finish(*f);
}

void ResponsesEventStream::open_item(json item) {
  close_item();
  output_.push_back(std::move(item));
  open_ = true;
  json added = output_.back();
  emit("response.output_item.added", {{"output_index", output_.size() - 1}, {"item", added}});
  if (added["type"] == "message")
    emit("response.content_part.added", {{"item_id", added["id"]}, {"output_index", output_.size() - 1}, {"content_index", 0},
                                         {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
}

void ResponsesEventStream::close_item() {
  if (!open_) return;
  open_ = false;
  json& item = output_.back();
  item["status"] = "completed";
  const size_t index = output_.size() - 1;
  const json id = item["id"];
  if (item["type"] == "message") {
    const json part = item["content"][0];
    emit("response.output_text.done", {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", part["text"]}, {"logprobs", json::array()}});
    emit("response.content_part.done", {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  } else if (item["type"] == "reasoning") {
    emit("response.reasoning_text.done", {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", item["content"][0]["text"]}});
  } else {
    emit("response.function_call_arguments.done", {{"item_id", id}, {"output_index", index}, {"name", item["name"]}, {"arguments", item["arguments"]}});
  }
  emit("response.output_item.done", {{"output_index", index}, {"item", item}});
}

void ResponsesEventStream::on_delta(const json& delta) {
  const size_t next = output_.size();
  auto open_type = [&]() -> std::string { return open_ ? output_.back()["type"].get<std::string>() : ""; };
  if (auto rc = delta.find("reasoning_content"); rc != delta.end() && rc->is_string() && !rc->get<std::string>().empty()) {
    if (open_type() != "reasoning") open_item(reasoning_item(fmt::format("rs_{}_{}", id_, next), "", "in_progress"));
    output_.back()["content"][0]["text"] = output_.back()["content"][0]["text"].get<std::string>() + rc->get<std::string>();
    emit("response.reasoning_text.delta", {{"item_id", output_.back()["id"]}, {"output_index", output_.size() - 1}, {"content_index", 0}, {"delta", *rc}});
  }
  if (auto ct = delta.find("content"); ct != delta.end() && ct->is_string() && !ct->get<std::string>().empty()) {
    if (open_type() != "message") open_item(message_item(fmt::format("msg_{}_{}", id_, output_.size()), "", "in_progress"));
    json& part = output_.back()["content"][0];
    part["text"] = part["text"].get<std::string>() + ct->get<std::string>();
    emit("response.output_text.delta", {{"item_id", output_.back()["id"]}, {"output_index", output_.size() - 1}, {"content_index", 0},
                                        {"delta", *ct}, {"logprobs", json::array()}});
  }
  if (auto tcs = delta.find("tool_calls"); tcs != delta.end() && tcs->is_array())
    for (const auto& tc : *tcs) on_tool_call_delta(tc);
}

void ResponsesEventStream::on_tool_call_delta(const json& tc) {
  const int index = tc.contains("index") && tc["index"].is_number_integer() ? tc["index"].get<int>() : 0;
  const json f = tc.value("function", json::object());
  if (index != open_tool_index_ || !open_ || output_.back()["type"] != "function_call") {
    open_tool_index_ = index;
    json call = {{"id", str_or(tc, "id", fmt::format("call_{}_{}", id_, index))}, {"function", {{"name", str_or(f, "name", "")}, {"arguments", ""}}}};
    open_item(call_item(fmt::format("fc_{}_{}", id_, output_.size()), call, "in_progress"));
  }
  const std::string args = str_or(f, "arguments", "");
  if (args.empty()) return;
  output_.back()["arguments"] = output_.back()["arguments"].get<std::string>() + args;
  emit("response.function_call_arguments.delta", {{"item_id", output_.back()["id"]}, {"output_index", output_.size() - 1}, {"delta", args}});
}

void ResponsesEventStream::on_finish(const json& finish_reason) {
  // A reply with no text at all still has its (empty) message item, as the non-streamed form.
  if (output_.empty()) open_item(message_item(fmt::format("msg_{}_0", id_), "", "in_progress"));
  close_item();
  finish_reason_ = finish_reason;
}

void ResponsesEventStream::on_error(const json& error) {
  close_item();
  const json e = error.is_object() ? error : json::object();
  emit("error", {{"code", str_or(e, "type", "server_error")}, {"message", str_or(e, "message", "generation failed")}, {"param", e.value("param", json(nullptr))}});
  json r = response("failed");
  r["error"] = {{"code", "server_error"}, {"message", str_or(e, "message", "generation failed")}};
  emit("response.failed", {{"response", r}});
  ended_ = true;
}

namespace {

// The Responses name of a chat field an error names (the client wrote the former).
std::string responses_name(std::string s) {
  static const std::pair<const char*, const char*> names[] = {
      {"max_completion_tokens", "max_output_tokens"}, {"response_format", "text.format"}, {"messages", "input"}};
  for (const auto& [chat, resp] : names)
    for (size_t at; (at = s.find(chat)) != std::string::npos;) s.replace(at, std::strlen(chat), resp);
  return s;
}

}  // namespace

void serve_responses(const httplib::Request& req, httplib::Response& res, const RequestLimits& limits,
                     const std::function<void(const httplib::Request&, httplib::Response&)>& chat) {
  // In request key order: the chat template renders tools and schemas as the client wrote them.
  const ordered_json ordered = parse_request_body_ordered(req.body, limits);
  const json body(ordered);
  check_fields(body, Endpoint::responses, stderr_unknown_field_log());
  httplib::Request creq = req;  // the peer's address and ports: the chat path watches for a hang-up
  creq.body = responses_to_chat(ordered).dump();
  httplib::Response cres;
  try {
    chat(creq, cres);
  } catch (const ApiError& e) {
    throw ApiError(e.status, responses_name(e.what()), responses_name(e.param));
  }
  if (!cres.content_provider_) {  // a whole chat.completion (or nothing: the client hung up)
    if (cres.body.empty()) return;
    const json completion = json::parse(cres.body, nullptr, false);
    if (!completion.is_object() || !completion.contains("choices")) {
      res.status = cres.status;
      res.set_content(cres.body, "application/json");
      return;
    }
    res.set_content(chat_to_response(completion, body).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    return;
  }
  // The chat stream's provider and releaser now belong to this response (cres must not release
  // them when it goes: its releaser cancels the request).
  auto provider = std::move(cres.content_provider_);
  auto releaser = std::move(cres.content_provider_resource_releaser_);
  cres.content_provider_resource_releaser_ = nullptr;
  auto events = std::make_shared<ResponsesEventStream>(body);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [provider, events](size_t offset, httplib::DataSink& sink) {
        httplib::DataSink inner;
        bool done = false;
        inner.write = [&](const char* d, size_t n) {
          std::vector<std::string> frames;
          try {
            frames = events->feed(std::string(d, n));
          } catch (const std::exception&) {  // a chunk of a shape not foreseen: end the stream, never the server
            return false;
          }
          for (const auto& frame : frames)
            if (!sink.write(frame.data(), frame.size())) return false;
          return true;
        };
        inner.done = [&] { done = true; };
        inner.is_writable = [&] { return sink.is_writable(); };
        const bool ok = provider(offset, 0, inner);
        if (ok && done) sink.done();
        return ok;
      },
      [releaser](bool success) {
        if (releaser) releaser(success);
      });
}

}  // namespace fuselm::server
