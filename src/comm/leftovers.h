// What a launch leaves behind when it cannot clean up (kill -9 of the launcher: its ranks die
// with it, PR_SET_PDEATHSIG, but nothing runs its clean-up), and how the next launch sweeps it
// (docs/faults.md): store directories in TMPDIR, named by their launcher, and /dev/shm names
// of ranks that are gone (comm/gloo/shm_communicator.h remove_stale_shm_segments).
#pragma once
#include <string>
#include <sys/types.h>

namespace parity::comm {

// A process's identity that survives pid reuse: "pid start-time" (/proc/<pid>/stat field 22);
// "" when it does not run.
std::string process_id(pid_t pid);

// Sweeps what launchers that are gone left (store directories under `root`, /dev/shm names),
// then creates this launcher's store directory under `root` (TMPDIR or /tmp when empty) with
// its owner file. Throws IoError naming the directory and the exhausted resource.
std::string make_store_dir(std::string root);

}  // namespace parity::comm
