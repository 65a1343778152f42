#include "agent_session.h"

#include "json_writer.h"

#include <cstdio>

namespace picolm::tools {
namespace {

const char* const kSeparator = "\n\n---\n\n";  // PicoClaw joins the system prompt's parts with it

// The static parts in PicoClaw's order: identity, workspace files (AGENT.md, SOUL.md, USER.md),
// skill catalog, memory. The texts are ours, shaped and sized like a lived-in PicoClaw workspace.
const char* const kIdentity = R"(# picoclaw 🦞 (v0.2.4)

You are picoclaw, a helpful AI assistant.

## Workspace
Your workspace is at: /home/pi/.picoclaw/workspace
- Memory: /home/pi/.picoclaw/workspace/memory/MEMORY.md
- Daily Notes: /home/pi/.picoclaw/workspace/memory/YYYYMM/YYYYMMDD.md
- Skills: /home/pi/.picoclaw/workspace/skills/{skill-name}/SKILL.md

## Important Rules

1. **ALWAYS use tools** - When you need to perform an action (schedule reminders, send messages, execute commands, etc.), you MUST call the appropriate tool. Do NOT just say you'll do it or pretend to do it.

2. **Be helpful and accurate** - When using tools, briefly explain what you're doing.

3. **Context summaries** - Conversation summaries provided as context are approximate references only. They may be incomplete or outdated. Always defer to explicit user instructions over summary content.

4. **Memory** - When interacting with me if something seems memorable, update /home/pi/.picoclaw/workspace/memory/MEMORY.md
)";

const char* const kWorkspace = R"(## AGENT.md

# Agent instructions

You run on a Raspberry Pi 5 in Anna's hallway cupboard and talk to her household through Telegram.
Keep answers short: most of them are read on a phone, often while walking. Prefer one short
paragraph or a list of at most five items. Use the user's language (Portuguese or English; answer in
the language of the last message).

## How to work
- Before answering a question about current events, prices, opening hours or the weather, search
  the web; never guess a number that could have changed.
- For reminders and anything recurring, use the cron tool. Confirm the time in the user's local
  time zone (Europe/Lisbon) and say when it will fire.
- Files: the household notes live under notes/ in the workspace (shopping.md, garden.md,
  recipes/, bills.md). Read a file before editing it, append to lists instead of rewriting them,
  and never delete a file unless asked twice.
- Shell: you may run read-only commands (df, free, uptime, systemctl status, journalctl -n) without
  asking. Anything that installs, restarts or deletes needs an explicit yes in the same chat.
- When a tool fails, say what failed in one sentence and what you will try instead.
- Do not send messages to other chats unless the user asks you to, and name the recipient.

## Things to avoid
- Long preambles ("Sure! I'd be happy to help...").
- Markdown tables: Telegram shows them badly. Use short lists.
- Making up file contents, command output or search results.

## SOUL.md

# Soul

I am calm, practical and a little dry. I like getting small things done well: a reminder that fires
at the right time, a shopping list that is actually up to date, a straight answer about whether the
laundry will dry outside today. I admit when I do not know something and go and find out. I do not
lecture. I remember that the people I help are busy, that they have two children and a dog, and
that their evenings are short. I care about their privacy: what is said in this chat stays in this
workspace.

## USER.md

# User

- Name: Anna Ferreira. Lives in Lisbon (Campo de Ourique) with Miguel (husband, Telegram chat
  604417322), Inês (9) and Tomás (6), and Bolacha, a beagle.
- Works as a structural engineer, mostly from home on Mondays and Fridays.
- Prefers metric units, 24-hour times, euros.
- Shopping: Pingo Doce on Rua Ferreira Borges for groceries, the Saturday market at Campo de
  Ourique for fruit and fish.
- Likes: hiking in Sintra, grilled sardines, crime novels. Dislikes: cilantro, long phone calls.
- The Pi also runs Home Assistant (port 8123) and a Pi-hole; do not touch their services without
  asking.
- Birthdays: Miguel 14 March, Inês 2 July, Tomás 19 September.

## IDENTITY.md

Name: Pico. Emoji: 🦞. Pronouns: it. Signature: none.
)";

const char* const kSkills = R"(# Skills

The following skills extend your capabilities. To use a skill, read its SKILL.md file using the read_file tool.

<skills>
  <skill>
    <name>weather</name>
    <description>Current weather and forecasts from wttr.in and the IPMA open data feed, with rain probability by hour.</description>
    <location>/home/pi/.picoclaw/workspace/skills/weather/SKILL.md</location>
    <source>builtin</source>
  </skill>
  <skill>
    <name>github</name>
    <description>Interact with GitHub using the gh CLI: issues, pull requests, workflow runs and releases.</description>
    <location>/home/pi/.picoclaw/workspace/skills/github/SKILL.md</location>
    <source>builtin</source>
  </skill>
  <skill>
    <name>summarize</name>
    <description>Summarize or extract text from URLs, podcasts and local files (articles, PDFs, transcripts).</description>
    <location>/home/pi/.picoclaw/workspace/skills/summarize/SKILL.md</location>
    <source>builtin</source>
  </skill>
  <skill>
    <name>tmux</name>
    <description>Remote-control tmux sessions for interactive command-line programs by sending keystrokes and reading pane output.</description>
    <location>/home/pi/.picoclaw/workspace/skills/tmux/SKILL.md</location>
    <source>builtin</source>
  </skill>
  <skill>
    <name>home-assistant</name>
    <description>Read sensor states and toggle lights and plugs through the local Home Assistant REST API (token in ~/.config/ha-token).</description>
    <location>/home/pi/.picoclaw/workspace/skills/home-assistant/SKILL.md</location>
    <source>workspace</source>
  </skill>
  <skill>
    <name>shopping-list</name>
    <description>Keep notes/shopping.md tidy: group items by shop, merge duplicates, tick off what was bought.</description>
    <location>/home/pi/.picoclaw/workspace/skills/shopping-list/SKILL.md</location>
    <source>workspace</source>
  </skill>
  <skill>
    <name>bills</name>
    <description>Track household bills in notes/bills.md and remind a few days before each due date.</description>
    <location>/home/pi/.picoclaw/workspace/skills/bills/SKILL.md</location>
    <source>workspace</source>
  </skill>
  <skill>
    <name>skill-creator</name>
    <description>Create or update a skill: folder layout, SKILL.md front matter, scripts and references.</description>
    <location>/home/pi/.picoclaw/workspace/skills/skill-creator/SKILL.md</location>
    <source>builtin</source>
  </skill>
</skills>)";

const char* const kMemory = R"(# Memory

## Long-term Memory

# MEMORY.md

## Household
- Bin collection: glass on Tuesdays, paper on Thursdays, general waste every evening after 20:00.
- The dog's vet is Clínica Veterinária da Estrela, +351 213 960 412; Bolacha's vaccines are due in
  February.
- Boiler service is done by Termolis every October; last one was 2026-10-09.
- Wi-Fi for guests: network "Ferreira-guest", password in notes/wifi.md (do not repeat it in chat).
- Inês has swimming on Wednesdays 17:30 at Piscina de Campo de Ourique; Tomás has football on
  Saturdays 10:00.

## Preferences
- Anna wants reminders 15 minutes before anything with a fixed time, unless she says otherwise.
- Miguel prefers messages without emoji.
- Shopping list format: one item per line, "- item", quantities in brackets.

## Projects
- Garden: the balcony tomatoes were replanted on 2026-09-20; water every second day when there is no
  rain; notes in notes/garden.md.
- Kitchen renovation quote from Obras Lima: 8,400 EUR, valid until 2026-12-15; Anna is waiting for a
  second quote.
- The Pi's SD card was replaced by an NVMe disk in August; backups run nightly to the NAS at 02:30.

## Recent Daily Notes

### 2026-11-25
- Asked for the Sintra hiking forecast for Sunday; chose the Pena trail.
- Added batteries (AA x8) and dog food to the shopping list.
- Cron job "water tomatoes" moved to 19:00.

### 2026-11-24
- Helped compare electricity tariffs (EDP vs Goldenergy); Anna will decide at the end of the month.
- Reminded Miguel about the parent-teacher meeting on Thursday at 18:00.

### 2026-11-23
- Looked up the opening hours of the Campo de Ourique library for Sunday (closed; open Tuesday to
  Saturday 10:00-18:00).
- Wrote a recipe for bacalhau à Brás into notes/recipes/bacalhau.md from Anna's dictation.
- Checked why the Pi-hole dashboard was slow: the query log had grown to 1.8 GB; Anna agreed to
  keep 30 days of logs instead of 365.

### 2026-11-22
- Set a recurring reminder for the paper bins on Thursdays at 20:00.
- Found two dentist slots for Tomás next week (Tuesday 16:00, Friday 09:30); Anna took Friday.)";

// Each tool as PicoClaw declares it (name, description, JSON Schema of the arguments), in the order
// its registry lists them. The descriptions and schemas follow pkg/tools of sipeed/picoclaw.
const char* const kTools = R"J([)J"
R"J({"type":"function","function":{"name":"web_search","description":"Search the web for current information. Supports query, count, and an optional temporal range filter. Returns titles, URLs, and snippets from search results.","parameters":{"type":"object","properties":{"query":{"type":"string","description":"Search query"},"count":{"type":"integer","description":"Number of results (default: 10, max: 10)","minimum":1,"maximum":10},"range":{"type":"string","description":"Optional time filter: d (day), w (week), m (month), y (year)","enum":["d","w","m","y"]}},"required":["query"]}}},)J"
R"J({"type":"function","function":{"name":"web_fetch","description":"Fetch a URL and extract readable content (HTML to text). Use this to get weather info, news, articles, or any web content.","parameters":{"type":"object","properties":{"url":{"type":"string","description":"URL to fetch"},"maxChars":{"type":"integer","description":"Maximum characters to extract","minimum":100}},"required":["url"]}}},)J"
R"J({"type":"function","function":{"name":"cron","description":"Schedule, inspect, and update reminders, tasks, or system commands. \nIMPORTANT: When user asks to be reminded or scheduled, you MUST call this tool. \nUse 'at_seconds' for one-time reminders (e.g., 'remind me in 10 minutes' → at_seconds=600). \nUse 'every_seconds' ONLY for recurring tasks (e.g., 'every 2 hours' → every_seconds=7200). \nUse 'cron_expr' for complex recurring schedules. \nUse 'command' to execute shell commands directly.","parameters":{"type":"object","properties":{"action":{"type":"string","enum":["add","list","get","update","remove","enable","disable"],"description":"Action to perform. Use 'get' before editing and 'update' to change existing jobs without losing their payload. Remote channels can only list/get/update jobs for the current channel/chat_id."},"name":{"type":"string","description":"Optional job display name for update or add."},"message":{"type":"string","description":"The reminder/task message to display when triggered. If 'command' is used, this describes what the command does."},"command":{"type":"string","description":"Optional: Shell command to execute directly (e.g., 'df -h'). If set, the agent will run this command and report output instead of just showing the message. For update, omit to preserve the command or pass an empty string to clear it."},"command_confirm":{"type":"boolean","description":"Optional explicit confirmation flag for scheduling a shell command. Command execution must also be enabled via tools.cron.allow_command."},"at_seconds":{"type":"integer","description":"One-time reminder: seconds from now when to trigger (e.g., 600 for 10 minutes later). Use this for one-time reminders like 'remind me in 10 minutes'."},"every_seconds":{"type":"integer","description":"Recurring interval in seconds (e.g., 3600 for every hour). Use this ONLY for recurring tasks like 'every 2 hours' or 'daily reminder'."},"cron_expr":{"type":"string","description":"Cron expression for complex recurring schedules (e.g., '0 9 * * *' for daily at 9am). Use this for complex recurring schedules."},"job_id":{"type":"string","description":"Job ID (for get/update/remove/enable/disable)"}},"required":["action"]}}},)J"
R"J({"type":"function","function":{"name":"list_dir","description":"List files and directories in a path","parameters":{"type":"object","properties":{"path":{"type":"string","description":"Path to list"}},"required":["path"]}}},)J"
R"J({"type":"function","function":{"name":"read_file","description":"Read the contents of a file. Supports pagination via `offset` and `length`.","parameters":{"type":"object","properties":{"path":{"type":"string","description":"Path to the file to read."},"offset":{"type":"integer","description":"Byte offset to start reading from.","default":0},"length":{"type":"integer","description":"Maximum number of bytes to read.","default":65536}},"required":["path"]}}},)J"
R"J({"type":"function","function":{"name":"write_file","description":"Write content to a file. Content is written byte-for-byte after argument decoding. Standard JSON escaping applies: \\n for newline and \\\\n for a literal backslash-n sequence. If the file already exists, you must set overwrite=true to replace it.","parameters":{"type":"object","properties":{"path":{"type":"string","description":"Path to the file to write"},"content":{"type":"string","description":"Content to write to the file. Standard JSON escaping applies: \\n for newline and \\\\n for literal backslash-n."},"overwrite":{"type":"boolean","description":"Must be set to true to overwrite an existing file.","default":false}},"required":["path","content"]}}},)J"
R"J({"type":"function","function":{"name":"append_file","description":"Append content to the end of a file. Standard JSON escaping applies: \\n for newline and \\\\n for literal backslash-n.","parameters":{"type":"object","properties":{"path":{"type":"string","description":"The file path to append to"},"content":{"type":"string","description":"The content to append. Standard JSON escaping applies: \\n for newline and \\\\n for literal backslash-n."}},"required":["path","content"]}}},)J"
R"J({"type":"function","function":{"name":"edit_file","description":"Edit a file by replacing old_text with new_text. The old_text must exist exactly in the file. Standard JSON escaping applies: \\n for newline and \\\\n for literal backslash-n.","parameters":{"type":"object","properties":{"path":{"type":"string","description":"The file path to edit"},"old_text":{"type":"string","description":"The exact text to find and replace. Standard JSON escaping applies: \\n for newline and \\\\n for literal backslash-n."},"new_text":{"type":"string","description":"The text to replace with. Standard JSON escaping applies: \\n for newline and \\\\n for literal backslash-n."}},"required":["path","old_text","new_text"]}}},)J"
R"J({"type":"function","function":{"name":"exec","description":"Execute shell commands. Use background=true for long-running commands (returns sessionId). Use pty=true for interactive commands (can combine with background=true). Use poll/read/write/send-keys/kill with sessionId to manage background sessions. Sessions auto-cleanup 30 minutes after process exits; use kill to terminate early. Output buffer limit: 1MB.","parameters":{"type":"object","properties":{"action":{"type":"string","enum":["run","list","poll","read","write","kill","send-keys"],"description":"Action: run (execute command), list (show sessions), poll (check status), read (get output), write (send input), kill (terminate), send-keys (send keys to PTY)"},"command":{"type":"string","description":"Shell command to execute (required for run)"},"sessionId":{"type":"string","description":"Session ID (required for poll/read/write/kill/send-keys)"},"keys":{"type":"string","description":"Key names for send-keys: up, down, left, right, enter, tab, escape, backspace, ctrl-c, ctrl-d, home, end, pageup, pagedown, f1-f12"},"data":{"type":"string","description":"Data to write to stdin (required for write)"},"background":{"type":"string","description":"Run in background immediately"},"pty":{"type":"string","description":"Run in a pseudo-terminal (PTY) when available"},"cwd":{"type":"string","description":"Working directory for the command"},"timeout":{"type":"integer","description":"Timeout in seconds (0 = no timeout)"}},"required":["action"]}}},)J"
R"J({"type":"function","function":{"name":"message","description":"Send a text message to the user on a chat channel.","parameters":{"type":"object","properties":{"content":{"type":"string","description":"Optional message text. When media is present, this text is used as the caption/body for the media message."},"channel":{"type":"string","description":"Optional: target channel (telegram, whatsapp, etc.)"},"chat_id":{"type":"string","description":"Optional: target chat/user ID"},"reply_to_message_id":{"type":"string","description":"Optional: reply target message ID for channels that support threaded replies"}},"required":["content"]}}})J"
R"J(])J";

// One scripted exchange: the user's message, the agent's tool calls (name, arguments as a JSON
// text) with their results, and its final answer.
struct ScriptedCall {
  const char* name;
  const char* arguments;
  const char* result;
};
struct ScriptedExchange {
  const char* user;
  std::vector<ScriptedCall> calls;
  const char* answer;
};

const std::vector<ScriptedExchange>& script() {
  static const std::vector<ScriptedExchange> s = {
      {"Will it rain in Lisbon on Saturday morning? Thinking of the market with the kids.",
       {{"web_search", R"({"query":"Lisbon weather Saturday morning rain forecast","count":3})",
         "1. IPMA - Lisboa: Saturday 28 Nov, showers until 11:00 (70%), then cloudy, 14-18°C\n"
         "   https://www.ipma.pt/en/otempo/prev.localidade.hora/#Lisboa\n"
         "2. Weather Lisbon - 10 day forecast: Sat light rain in the morning, 4 mm, wind NW 15 km/h\n"
         "   https://www.timeanddate.com/weather/portugal/lisbon/ext\n"
         "3. AccuWeather Lisbon: Saturday AM showers, clearing in the afternoon\n"
         "   https://www.accuweather.com/en/pt/lisbon/274087/daily-weather-forecast/274087"}},
       "Yes, likely: showers until about 11:00 (70%), around 4 mm, 14-18°C. The afternoon should be dry, "
       "so the market after lunch or umbrellas in the morning."},
      {"Remind me in 20 minutes to call the plumber about the kitchen tap.",
       {{"cron", R"({"action":"add","name":"call plumber","message":"Call the plumber about the kitchen tap","at_seconds":1200})",
         "Cron job added: call plumber (id: 7f3a9c21), fires once in 20 minutes (channel telegram, chat 581234907)"}},
       "Done: I'll remind you in 20 minutes to call the plumber about the kitchen tap."},
      {"What do I have in the notes folder?",
       {{"list_dir", R"({"path":"notes"})",
         "DIR:  recipes\nFILE: bills.md (2.1 KB)\nFILE: garden.md (1.4 KB)\nFILE: shopping.md (312 B)\n"
         "FILE: wifi.md (96 B)\nFILE: school.md (880 B)"}},
       "notes/ has: bills.md, garden.md, shopping.md, school.md, wifi.md and a recipes/ folder."},
      {"Add olive oil and 2 lemons to the shopping list please.",
       {{"append_file", R"({"path":"notes/shopping.md","content":"- olive oil\n- lemons (2)\n"})",
         "Appended to notes/shopping.md"}},
       "Added olive oil and lemons (2) to the shopping list."},
      {"Read me the shopping list.",
       {{"read_file", R"({"path":"notes/shopping.md"})",
         "# Shopping\n\n## Pingo Doce\n- batteries (AA x8)\n- dog food (2 kg)\n- milk (6)\n- olive oil\n"
         "- lemons (2)\n\n## Market\n- sardines (1 kg)\n- oranges\n\n[file: notes/shopping.md, 312 bytes, complete]"}},
       "Pingo Doce: batteries (AA x8), dog food (2 kg), milk (6), olive oil, lemons (2). Market: sardines (1 kg), oranges."},
      {"How much disk space is left on the Pi?",
       {{"exec", R"({"action":"run","command":"df -h / /mnt/nas"})",
         "Filesystem      Size  Used Avail Use% Mounted on\n/dev/nvme0n1p2  234G   61G  161G  28% /\n"
         "nas:/backup     3.6T  2.2T  1.4T  62% /mnt/nas\n[exit code: 0]"}},
       "The NVMe disk has 161 GB free of 234 GB (28% used); the NAS backup share has 1.4 TB free (62% used)."},
      {"Send the shopping list to Miguel too, he's passing Pingo Doce on the way home.",
       {{"message",
         R"({"content":"Shopping list from Anna - Pingo Doce: batteries (AA x8), dog food (2 kg), milk (6), olive oil, lemons (2).","channel":"telegram","chat_id":"604417322"})",
         "Message sent to telegram:604417322"}},
       "Sent the Pingo Doce part of the list to Miguel."},
      {"Thanks! What reminders do I have set up now?",
       {{"cron", R"({"action":"list"})",
         "Jobs (3):\n- 7f3a9c21 call plumber: once, in 2 minutes\n- 2b81d0e4 water tomatoes: every day at 19:00\n"
         "- 90c4e6aa bins (paper): every Thursday at 20:00"}},
       "Three: call the plumber (in about 2 minutes), water the tomatoes (daily 19:00) and paper bins (Thursdays 20:00)."},
  };
  return s;
}

// The clock: days since 1970-01-01 <-> civil date (H. Hinnant's algorithms), so a session that
// crosses midnight or a month end still shows real dates.
long days_from_civil(int y, unsigned m, unsigned d) {
  y -= m <= 2;
  const long era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<long>(doe) - 719468;
}
void civil_from_days(long z, int& y, unsigned& m, unsigned& d) {
  z += 719468;
  const long era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  d = doy - (153 * mp + 2) / 5 + 1;
  m = mp < 10 ? mp + 3 : mp - 9;
  y = static_cast<int>(yoe) + static_cast<int>(era * 400) + (m <= 2);
}

// Go's "2006-01-02 15:04 (Monday)" for the session start 2026-11-26 09:44 plus `minutes`.
std::string clock_line(long minutes) {
  static const char* const kWeekdays[] = {"Thursday", "Friday", "Saturday", "Sunday",
                                          "Monday", "Tuesday", "Wednesday"};  // 1970-01-01 was a Thursday
  const long start = days_from_civil(2026, 11, 26) * 1440 + 9 * 60 + 44;
  const long t = start + minutes;
  const long days = t / 1440;
  const long minute_of_day = t % 1440;
  int y;
  unsigned m, d;
  civil_from_days(days, y, m, d);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02u-%02u %02ld:%02ld (%s)", y, m, d, minute_of_day / 60,
                minute_of_day % 60, kWeekdays[days % 7]);
  return buf;
}

const char* const kRuntimeLine = "linux arm64, Go 1.25.3";
const char* const kChannelLine = "Channel: telegram";
const char* const kChatLine = "Chat ID: 581234907";
const char* const kSenders[] = {"Current sender: Anna (ID: 581234907)", "Current sender: Miguel (ID: 604417322)"};
const char* const kSummaryPrefix =
    "CONTEXT_SUMMARY: The following is an approximate summary of prior conversation for reference only. "
    "It may be incomplete or outdated — always defer to explicit instructions.\n\n";
const char* const kSummaries[] = {
    "Anna planned Saturday (market, rain until 11:00), asked for a plumber reminder and reviewed her notes folder.",
    "Anna planned Saturday, set a plumber reminder, updated and read the shopping list and checked the Pi's disk space.",
};

void append_user(std::string& out, const std::string& text) {
  out += R"({"role":"user","content":)" + json_string(text) + "}";
}

}  // namespace

std::string json_string(const std::string& s) {
  std::string out;
  json::append_json_string(out, s);
  return out;
}

const std::string& agent_static_prompt() {
  static const std::string s = std::string(kIdentity) + kSeparator + kWorkspace + kSeparator + kSkills +
                               kSeparator + kMemory;
  return s;
}

std::vector<AgentTurn> make_agent_session(const AgentSessionOptions& o) {
  const auto& exchanges = script();
  const int n_script = static_cast<int>(exchanges.size());
  std::vector<AgentTurn> turns;
  std::vector<std::string> shown;  // every value an earlier turn showed, in order
  std::string history;             // messages of the finished exchanges, each followed by ','
  for (int k = 0; k < o.turns; ++k) {
    // The dynamic block, built as PicoClaw's buildDynamicContext does.
    const std::string time = clock_line(o.clock_frozen ? 0L : static_cast<long>(k) * o.minutes_between_turns);
    const std::string sender = kSenders[o.sender_changes ? k % 2 : 0];
    std::string dynamic = "## Current Time\n" + time + "\n\n## Runtime\n" + kRuntimeLine +
                          "\n\n## Current Session\n" + kChannelLine + "\n" + kChatLine +
                          "\n\n## Current Sender\n" + sender;
    std::vector<std::string> current = {time, kRuntimeLine, kChannelLine, kChatLine, sender};
    if (o.with_summary) {
      const std::string summary = kSummaries[k * 2 < o.turns ? 0 : 1];
      dynamic += kSeparator + (kSummaryPrefix + summary);
      current.push_back(summary);
    }
    std::string system;
    switch (o.at) {
      case AgentSessionOptions::DynamicAt::End:
        system = agent_static_prompt() + kSeparator + dynamic;
        break;
      case AgentSessionOptions::DynamicAt::Middle:
        system = std::string(kIdentity) + kSeparator + kWorkspace + kSeparator + dynamic + kSeparator + kSkills +
                 kSeparator + kMemory;
        break;
      case AgentSessionOptions::DynamicAt::Start:
        system = dynamic + kSeparator + agent_static_prompt();
        break;
    }

    const ScriptedExchange& ex = exchanges[k % n_script];
    // After the first pass through the script the user's words get the round, so no two turns
    // of a long session send the same message.
    std::string user = ex.user;
    if (k >= n_script) user += " (" + std::to_string(k / n_script + 1) + ")";

    AgentTurn turn;
    turn.request_json = "{\"model\":" + json_string(o.model) + ",\"messages\":[{\"role\":\"system\",\"content\":" +
                        json_string(system) + "}," + history;
    append_user(turn.request_json, user);
    turn.request_json += std::string("],\"tools\":") + kTools + ",\"tool_choice\":\"auto\",\"max_tokens\":" +
                         std::to_string(o.max_tokens) + ",\"temperature\":0";
    if (o.stream) turn.request_json += R"(,"stream":true,"stream_options":{"include_usage":true})";
    turn.request_json += "}";
    for (const std::string& v : shown) {
      bool is_current = false;
      for (const std::string& c : current) is_current = is_current || c == v;
      bool listed = false;
      for (const std::string& e : turn.earlier_values) listed = listed || e == v;
      if (!is_current && !listed) turn.earlier_values.push_back(v);
    }
    shown.insert(shown.end(), current.begin(), current.end());
    turn.current_values = std::move(current);
    turns.push_back(std::move(turn));

    // This exchange as the next turns' history: the user message, one assistant message with the
    // tool calls (empty content, as PicoClaw records it), the tool results, the final answer.
    append_user(history, user);
    history += ",{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[";
    for (size_t c = 0; c < ex.calls.size(); ++c) {
      const std::string id = "call_" + std::to_string(k + 1) + "_" + std::to_string(c + 1);
      if (c) history += ",";
      history += "{\"id\":\"" + id + "\",\"type\":\"function\",\"function\":{\"name\":\"" + ex.calls[c].name +
                 "\",\"arguments\":" + json_string(ex.calls[c].arguments) + "}}";
    }
    history += "]}";
    for (size_t c = 0; c < ex.calls.size(); ++c) {
      const std::string id = "call_" + std::to_string(k + 1) + "_" + std::to_string(c + 1);
      history += ",{\"role\":\"tool\",\"content\":" + json_string(ex.calls[c].result) + ",\"tool_call_id\":\"" +
                 id + "\"}";
    }
    history += ",{\"role\":\"assistant\",\"content\":" + json_string(ex.answer) + "},";
  }
  return turns;
}

}  // namespace picolm::tools
