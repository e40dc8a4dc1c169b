// The shardrl executable: everything it does lives in the libraries, so tests link those.
#include "app/cli.hpp"

int main(int argc, char** argv) { return shardrl::run_cli(argc, argv); }
