#include "tide/data/jsonl_records.h"

#include <nlohmann/json.hpp>
#include <string_view>

#include "tide/core/error.h"
#include "tide/core/json_error.h"

namespace tide {

namespace {

const nlohmann::json* string_field(const nlohmann::json& j, const char* key,
                                   const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) return nullptr;
  TIDE_CHECK(it->is_string(), "{}: \"{}\" is {}, not a string", where, key,
             it->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return &*it;
}

}  // namespace

std::vector<Record> parse_jsonl_records(const std::string& contents, const std::string& source) {
  std::vector<Record> records;
  size_t line_no = 0;
  for (size_t pos = 0; pos < contents.size();) {
    size_t end = contents.find('\n', pos);
    if (end == std::string::npos) end = contents.size();
    const std::string_view line(contents.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = fmt::format("{} line {}", source, line_no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      TIDE_FAIL("{}: not valid JSON ({}); each line of a JSONL file is one JSON object", where,
                json_error_text(e));
    }
    TIDE_CHECK(j.is_object(),
               "{}: a JSONL record must be an object, {{\"text\": ...}} or {{\"prompt\": ..., "
               "\"completion\": ...}}",
               where);
    const nlohmann::json* text = string_field(j, "text", where);
    const nlohmann::json* prompt = string_field(j, "prompt", where);
    const nlohmann::json* completion = string_field(j, "completion", where);
    TIDE_CHECK((text != nullptr) != (prompt != nullptr || completion != nullptr) &&
                   (prompt != nullptr) == (completion != nullptr),
               "{}: a record holds \"text\" (trained on whole) or both \"prompt\" and "
               "\"completion\" (the prompt left out of the loss), not {}",
               where,
               text && (prompt || completion) ? "both kinds"
               : prompt                       ? "a prompt without a completion"
               : completion                   ? "a completion without a prompt"
                                              : "neither");
    Record r;
    if (text) {
      r.text = text->get<std::string>();
    } else {
      r.prompt = prompt->get<std::string>();
      r.text = completion->get<std::string>();
      r.has_prompt = true;
    }
    TIDE_CHECK(!r.text.empty(), "{}: the {} is empty; there is nothing to train on", where,
               r.has_prompt ? "completion" : "text");
    records.push_back(std::move(r));
  }
  return records;
}

}  // namespace tide
