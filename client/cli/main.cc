#include "client/cli/ctl_main.h"

int main(int argc, char** argv) { return ard::cli::CtlMain(argc, argv); }
