// The `parity` command. Placeholder until the subcommands land.
#include <cstdio>
int main() { std::puts("parity"); return 0; }
