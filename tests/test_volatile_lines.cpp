// Volatile lines of a system message (provider/volatile_lines.h): which lines are found, how they
// are moved, and what the tracker remembers across a restart.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "volatile_lines.h"

using namespace picolm;

namespace {

constexpr uint64_t kChat = 42;  // conversation_key of the chat the requests belong to

std::string static_part() {
  std::string s = "# picoclaw\n\nYou are picoclaw, a personal assistant.\n\n## Rules\n";
  for (int i = 0; i < 40; ++i) s += "- Rule " + std::to_string(i) + ": answer briefly and use tools when asked.\n";
  s += "\n## Memory\nThe user likes tea.";
  return s;
}

std::string dynamic_block(const std::string& clock, const std::string& sender) {
  return "## Current Time\n" + clock + "\n\n## Runtime\nlinux arm64, Go 1.25.3\n\n## Current Session\nChannel: telegram\n"
         "Chat ID: 581234907\n\n## Current Sender\nCurrent sender: " + sender + " (ID: 581234907)";
}

std::string picoclaw_system(const std::string& clock, const std::string& sender = "Anna") {
  return static_part() + "\n\n---\n\n" + dynamic_block(clock, sender);
}

// The text of the lines `idx` of `text`.
std::vector<std::string> lines_at(const std::string& text, const std::vector<size_t>& idx) {
  const auto lines = split_lines(text);
  std::vector<std::string> out;
  for (size_t i : idx) out.emplace_back(lines.at(i));
  return out;
}

std::filesystem::path scratch_dir(const char* name) {
  auto d = std::filesystem::temp_directory_path() / ("picolm_volatile_" + std::string(name) + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace

TEST_CASE("clock lines are recognised; versions, ids, dated notes and schedules are not", "[unit][volatile]") {
  for (const char* yes : {"2026-11-26 09:44 (Thursday)", "Current time: 2026-11-26 9:05", "It is 26/11/2026.",
                          "Date: 26.11.2026", "Today is Nov 26, 2026", "26 November 2026", "2026-11-26T09:44:00Z",
                          "Thursday, 26 November 2026, 09:44 CET", "The current date and time is 2026-11-26 09:44 UTC."}) {
    INFO(yes);
    CHECK(line_reads_as_clock(yes));
  }
  for (const char* no : {"linux arm64, Go 1.25.3", "Chat ID: 581234907", "server 192.168.1.10", "ratio 3:1",
                         "version 1.2.3", "Current sender: Anna (ID: 581234907)", "You may 3 times retry",
                         "a mayor of March", "Channel: telegram", "Current time: 9:05", "### 2026-11-25",
                         "Knowledge Cutoff Date: June 2025", "- Boiler service is done every October; last one was 2026-10-09.",
                         "- Found two dentist slots (Tuesday 16:00, Friday 09:30); Anna took Friday.",
                         "Anna planned Saturday (market, rain until 11:00) and reviewed her notes."}) {
    INFO(no);
    CHECK_FALSE(line_reads_as_clock(no));
  }
}

TEST_CASE("split_lines gives the text back", "[unit][volatile]") {
  for (std::string t : {"", "a", "a\n", "\n\nb\n", "x\ny\nz"}) {
    const auto lines = split_lines(t);
    std::string joined;
    for (size_t i = 0; i < lines.size(); ++i) joined += (i ? "\n" : "") + std::string(lines[i]);
    CHECK(joined == t);
  }
}

// The value lines of PicoClaw's dynamic block for a clock and a sender.
std::vector<std::string> block_values(const std::string& clock, const std::string& sender) {
  return {clock, "linux arm64, Go 1.25.3", "Channel: telegram", "Chat ID: 581234907",
          "Current sender: " + sender + " (ID: 581234907)"};
}

TEST_CASE("the clock's short block is volatile from the first request, whatever changes in it later", "[unit][volatile]") {
  VolatileLineTracker t(VolatileOptions{});
  const std::string s1 = picoclaw_system("2026-11-26 09:44 (Thursday)");
  CHECK(lines_at(s1, t.classify(s1, kChat)) == block_values("2026-11-26 09:44 (Thursday)", "Anna"));
  const std::string s2 = picoclaw_system("2026-11-26 09:47 (Thursday)", "Ben");
  CHECK(lines_at(s2, t.classify(s2, kChat)) == block_values("2026-11-26 09:47 (Thursday)", "Ben"));
  const std::string s3 = picoclaw_system("2026-11-26 09:50 (Thursday)", "Anna");
  CHECK(lines_at(s3, t.classify(s3, kChat)) == block_values("2026-11-26 09:50 (Thursday)", "Anna"));
}

TEST_CASE("a line outside the clock's block is volatile from when it changes, and stays so", "[unit][volatile]") {
  VolatileLineTracker t(VolatileOptions{});
  // No horizontal rule: the clock's block is the whole prompt, too long to move; the clock alone is.
  auto sys = [](const std::string& clock, const std::string& sender) {
    return static_part() + "\nCurrent time: " + clock + "\nCurrent sender: " + sender;
  };
  const std::string s1 = sys("2026-11-26 09:44", "Anna");
  CHECK(lines_at(s1, t.classify(s1, kChat)) == std::vector<std::string>{"Current time: 2026-11-26 09:44"});
  const std::string s2 = sys("2026-11-26 09:47", "Anna");
  CHECK(lines_at(s2, t.classify(s2, kChat)) == std::vector<std::string>{"Current time: 2026-11-26 09:47"});
  // The sender changes: the diff against the prompt before finds it.
  const std::string s3 = sys("2026-11-26 09:50", "Ben");
  CHECK(lines_at(s3, t.classify(s3, kChat)) == std::vector<std::string>{"Current time: 2026-11-26 09:50", "Current sender: Ben"});
  // ... and it stays volatile when it changes back (same layout as the turn before).
  const std::string s4 = sys("2026-11-26 09:53", "Anna");
  CHECK(lines_at(s4, t.classify(s4, kChat)) == std::vector<std::string>{"Current time: 2026-11-26 09:53", "Current sender: Anna"});
  const std::string s5 = sys("2026-11-26 09:56", "Anna");
  CHECK(lines_at(s5, t.classify(s5, kChat)) == std::vector<std::string>{"Current time: 2026-11-26 09:56", "Current sender: Anna"});
}

TEST_CASE("a changing line is found at the start, in the middle, whatever its wording", "[unit][volatile]") {
  VolatileLineTracker t(VolatileOptions{});
  auto with_token = [](int k) {
    return "Session token: " + std::string(1, char('a' + k)) + "x" + std::string(1, char('q' + k)) + "\n" + static_part();
  };
  CHECK(t.classify(with_token(0), kChat).empty());  // nothing reads as a clock, nothing to compare with
  CHECK(t.classify(with_token(1), kChat) == std::vector<size_t>{0});
  CHECK(t.classify(with_token(2), kChat) == std::vector<size_t>{0});
  // In the middle: the mood line between the rules and the memory.
  VolatileLineTracker m(VolatileOptions{});
  auto middle = [](const char* mood) {
    return "# bot\n\nRules:\n- be brief\n- be kind\n\nMood of the user: " + std::string(mood) + "\n\n" + static_part();
  };
  CHECK(m.classify(middle("happy"), kChat).empty());
  const auto idx = m.classify(middle("sleepy"), kChat);
  CHECK(lines_at(middle("sleepy"), idx) == std::vector<std::string>{"Mood of the user: sleepy"});
}

TEST_CASE("lines are learned within a conversation only; learned lines carry over to similar prompts", "[unit][volatile]") {
  VolatileLineTracker t(VolatileOptions{});
  auto sys = [](const std::string& soul, const std::string& sender) {
    return static_part() + "\nSoul: " + soul + "\nCurrent sender: " + sender;
  };
  CHECK(t.classify(sys("calm", "Anna"), 1).empty());
  // Another agent (another conversation) whose prompt differs in one line: not a clock.
  CHECK(t.classify(sys("cheerful", "Anna"), 2).empty());
  // Within conversation 1 the sender changes: learned.
  CHECK(lines_at(sys("calm", "Ben"), t.classify(sys("calm", "Ben"), 1)) == std::vector<std::string>{"Current sender: Ben"});
  // A new conversation of the same agent moves the learned line from its first request on.
  CHECK(lines_at(sys("calm", "Cleo"), t.classify(sys("calm", "Cleo"), 3)) == std::vector<std::string>{"Current sender: Cleo"});
}

TEST_CASE("conversation_key: the first message after the system message", "[unit][volatile]") {
  std::vector<ChatMessage> a(2), b(3);
  a[0].role = b[0].role = "system";
  a[0].content = "x";
  b[0].content = "y";
  a[1].role = b[1].role = "user";
  a[1].content = b[1].content = "hello";
  b[2].role = "assistant";
  CHECK(conversation_key(a) == conversation_key(b));
  CHECK(conversation_key(a) != 0);
  b[1].content = "hello!";
  CHECK(conversation_key(a) != conversation_key(b));
  a.resize(1);
  CHECK(conversation_key(a) == 0);
}

TEST_CASE("a different prompt or a timetable is not moved", "[unit][volatile]") {
  VolatileLineTracker t(VolatileOptions{});
  CHECK(t.classify(static_part(), kChat).empty());
  // Another prompt: most lines differ, nothing is learned from the comparison.
  std::string other = "You are a cook.\n";
  for (int i = 0; i < 30; ++i) other += "Recipe " + std::to_string(i) + " needs salt.\n";
  CHECK(t.classify(other, kChat).empty());
  // A schedule of many times is content, not a clock.
  std::string timetable = "Bus times:\n";
  for (int h = 6; h < 20; ++h) timetable += std::to_string(h) + ":15 departs\n";
  CHECK(t.classify(timetable, kChat).empty());
  // A long line is content even with a date in it.
  const std::string long_line = "Policy of 2024-01-01: " + std::string(400, 'x');
  CHECK(t.classify(long_line, kChat).empty());
}

TEST_CASE("what was learned survives a restart through the state file; a bad file is ignored", "[unit][volatile]") {
  const auto dir = scratch_dir("state");
  VolatileOptions o;
  o.state_file = (dir / "volatile-lines.txt").string();
  auto sys = [](const std::string& clock, const std::string& sender) {
    return static_part() + "\nCurrent time: " + clock + "\nCurrent sender: " + sender;
  };
  const std::string ben = sys("2026-11-26 10:00", "Ben");
  const std::string anna = sys("2026-11-26 10:03", "Anna");
  {
    VolatileLineTracker t(o);
    t.classify(sys("2026-11-26 09:57", "Anna"), kChat);
    CHECK(t.classify(ben, kChat).size() == 2);
  }
  REQUIRE(std::filesystem::exists(o.state_file));
  {
    VolatileLineTracker t(o);  // a restart
    CHECK(t.remembered() >= 1);
    CHECK(lines_at(anna, t.classify(anna, kChat)) == std::vector<std::string>{"Current time: 2026-11-26 10:03", "Current sender: Anna"});
  }
  // Truncated, then garbage: ignored, the tracker starts empty and still works.
  std::string text;
  {
    std::ifstream f(o.state_file);
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  for (const std::string& bad : {text.substr(0, text.size() / 2), std::string("picolm-volatile-lines 2\nP zz 99999999\n"),
                                 text.substr(0, text.size() - 3) + "0\n"}) {
    std::ofstream(o.state_file, std::ios::trunc) << bad;
    VolatileLineTracker t(o);
    CHECK(t.remembered() == 0);
    CHECK(lines_at(anna, t.classify(anna, kChat)) == std::vector<std::string>{"Current time: 2026-11-26 10:03"});
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("relocation: placeholder in the system message, a note with its heading on the latest message", "[unit][volatile]") {
  const std::string sys = picoclaw_system("2026-11-26 09:44 (Thursday)", "Anna");
  const auto lines = split_lines(sys);
  std::vector<size_t> idx;
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i] == "2026-11-26 09:44 (Thursday)" || lines[i].starts_with("Current sender:")) idx.push_back(i);
  REQUIRE(idx.size() == 2);
  std::vector<ChatMessage> msgs(4);
  msgs[0].role = "system";
  msgs[0].content = sys;
  msgs[1].role = "user";
  msgs[1].content = "hello";
  msgs[2].role = "assistant";
  msgs[2].content = "hi";
  msgs[3].role = "user";
  msgs[3].content = "what time is it?";
  RelocatedMessages r = relocate_volatile_lines(msgs, idx);
  REQUIRE(r.moved.size() == 2);
  CHECK(r.note_message == 3);
  CHECK(r.messages[1].content == "hello");
  CHECK(r.messages[3].content ==
        "what time is it?\n\n<current_context>\n## Current Time\n2026-11-26 09:44 (Thursday)\n## Current Sender\n"
        "Current sender: Anna (ID: 581234907)\n</current_context>");
  CHECK(r.messages[0].content.find("09:44") == std::string::npos);
  CHECK(r.messages[0].content.find("Anna") == std::string::npos);
  CHECK(r.messages[0].content.find("## Current Time\n" + std::string(kVolatilePlaceholder) + "\n\n## Runtime") !=
        std::string::npos);
  // Everything else of the system message is unchanged.
  std::string back = r.messages[0].content;
  for (const auto& moved : r.moved) back.replace(back.find(kVolatilePlaceholder), kVolatilePlaceholder.size(), moved);
  CHECK(back == sys);

  // An agent loop ends with tool results: the note goes on the last tool message.
  msgs[2].tool_calls.push_back(ToolCall{"call_1", "exec", "{}"});
  msgs.push_back(ChatMessage{"tool", "done", {}, "call_1", "", std::nullopt});
  r = relocate_volatile_lines(msgs, idx);
  CHECK(r.note_message == 4);
  CHECK(r.messages[3].content == "what time is it?");
  // Nothing after the system message to carry the note: unchanged.
  msgs.resize(1);
  r = relocate_volatile_lines(msgs, idx);
  CHECK(r.moved.empty());
  CHECK(r.messages[0].content == sys);
}
