#include "ctl/ctl_main.h"

int main(int argc, char** argv) { return ard::ctl::CtlMain(argc, argv); }
