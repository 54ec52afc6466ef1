#include "daemon/daemon_main.h"

int main(int argc, char** argv) { return ard::DaemonMain(argc, argv); }
