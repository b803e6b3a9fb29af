// What a launch leaves behind when it cannot clean up (kill -9 of the launcher: its ranks die
// with it, PR_SET_PDEATHSIG, but nothing runs its clean-up), and how the next launch sweeps it
// (docs/faults.md): store directories in TMPDIR, named by their launcher, /dev/shm names
// of ranks that are gone (comm/gloo/shm_communicator.h remove_stale_shm_segments), and under
// backend mpi OpenMPI's own files.
//
// OpenMPI 4.1 writes, for every job: its session directory (ompi.HOST.UID/pid.MPIRUNPID/ with
// PMIx's shared-memory data store, hwloc's topology, contact.txt) under $TMPDIR, and the vader
// BTL's shared-memory segments (vader_segment.HOST.UID.JOBID.LOCALRANK, 4 MiB each) in
// /dev/shm. mpirun removes both when it ends; killed by -9 (with the launcher, through
// PR_SET_PDEATHSIG) it removes nothing, and a name like vader_segment.* carries nothing that
// proves which program's job it was or whether that job still runs. So parity points both
// into directories of its own that carry their launcher's identity (mpi_dirs_env):
//   orte_tmpdir_base            -> the launcher's store directory, TMPDIR/parity-rdzv-XXXXXX
//   btl_vader_backing_directory -> /dev/shm/parity-mpi-XXXXXX (its own "launcher" file)
// and every launch removes the ones whose launcher no longer runs. Nothing else in /dev/shm
// or TMPDIR is touched: another program's vader_segment.* stays where it is.
#pragma once
#include <string>
#include <sys/types.h>
#include <vector>

namespace parity::proc {

// A process's identity that survives pid reuse: "pid start-time" (/proc/<pid>/stat field 22);
// "" when it does not run.
std::string process_id(pid_t pid);

// Sweeps what launchers that are gone left (store directories under `root`, /dev/shm names,
// /dev/shm/parity-mpi-* directories), then creates this launcher's store directory under
// `root` (TMPDIR or /tmp when empty) with its owner file. Throws IoError naming the directory
// and the exhausted resource.
std::string make_store_dir(std::string root);

// Directories "PREFIX*" under `root` (parity's own: made by make_owned_dir) whose launcher no
// longer runs, removed; returns how many. One without its owner file (a launcher killed
// between mkdtemp and writing it) counts as stale once it is an hour old.
int remove_stale_owned_dirs(const std::string& root, const std::string& prefix);

// `root`/PREFIXxxxxxx, fresh, with a "launcher" file holding process_id(getpid()). Throws
// IoError naming the directory.
std::string make_owned_dir(const std::string& root, const std::string& prefix);

// Backend mpi: this launcher's /dev/shm/parity-mpi-XXXXXX for OpenMPI's shared-memory
// segments; when /dev/shm cannot take it, `fallback` (the store directory: still swept, if
// slower than tmpfs).
std::string make_mpi_shm_dir(const std::string& fallback);

// mpirun's environment `env` pointed at parity's directories (see above): an entry of the
// same name the user set is replaced, so the sweep can prove whose the files are.
void mpi_dirs_env(std::vector<std::string>& env, const std::string& shm_dir, const std::string& store_dir);

}  // namespace parity::proc
