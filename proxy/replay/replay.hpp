#pragma once
// `nackguard replay`: moves dead-lettered messages from <queue>.dlq back to <queue>, acking
// each original only after the broker has confirmed its copy. See docs/replay.md.

namespace nackguard::replay {

// The subcommand's entry point; argv[0] is "replay". Returns the exit code: 0 done, 1 a run
// that failed or copies that were not accepted, 2 a wrong command line, 130 interrupted.
int main(int argc, char** argv);

}  // namespace nackguard::replay
