// The allreduced process: parse flags and config, set up logging and signals, run a Daemon until
// SIGTERM/SIGINT; SIGHUP re-reads the config (config_reload.h). Kept out of main.cc so main stays
// a line. Runs on the main thread, which does nothing but wait for signals once the Daemon runs.
#pragma once

namespace ard {

// Exit codes: 0 after a graceful shutdown, 1 on a startup error (one line on stderr), 2 on bad
// flags or config, 3 when the coordinator refused this daemon: its host name is held by another
// live daemon, or the two speak different protocol versions (after an orderly shutdown; the last
// stderr line names both daemons or both versions).
int DaemonMain(int argc, char** argv);

}  // namespace ard
