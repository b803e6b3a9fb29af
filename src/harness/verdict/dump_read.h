// Reading a dump for `parity compare` (dump_compare.h) without trusting it (issue 46): a
// dump's manifest, files and tensors come from anywhere (parity_torch's Collector, a
// framework's own writer, a hand-edited copy), so every read is checked before it is used.
//   - a manifest's file entries are plain names inside the dump's directory: no "/", no
//     "..", no absolute path; a file that is a symbolic link, or the very file (inode) the
//     reference holds for that step, is refused (a candidate pointing its step at the
//     reference's file would compare the reference with itself);
//   - a tensor's stored dtype is the kind the quantity is: a float (F32, F64) for values, I64
//     for tokens, counts and expert indices; a same-size other dtype is refused, never
//     reinterpreted;
//   - no file is read past a bound from the reference's model (twice what a step of that
//     model holds, plus 16 MiB), so a 100 GiB sparse file is refused with its size;
//   - the reference's recorded noise (the bounds) is finite and non-negative, and held at
//     noise_ceiling (below): a forged 1e300 cannot let a doubled gradient pass, and a genuine
//     twin's noise on a family that is all cancellation is not refused;
//   - a reference value that is not finite is the reference's own divergence (DivergedError,
//     exit 4), not a verdict on the candidate.
// A damaged file, a refused entry, a wrong dtype: ConfigError (exit 2) naming the dump's role,
// the file and the tensor.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/precision.h"
#include "core/safetensors.h"
#include "mesh/run_config.h"

namespace parity {

// The largest noise a rounding twin can show for noise index i (bounds.h order) in precision
// p: 1000x the row's floor (the twin widens the fixed table by at most 10^4: fp64's gradients
// 1e-8, where twins measure 3e-14), never above 0.05 for a normwise row, so a bound stays
// under 0.5 and a doubled or halved reduction (a normwise error of 1 or 0.5) always fails
// (bf16 twins measure up to 0.035 over 30 free-running steps); a far fraction at most 1.
double noise_ceiling(const Precision& p, size_t i);

// Why `name` (a manifest's file entry) is not a plain file name inside the dump's directory, or "".
std::string dump_file_name_problem(const std::string& name);

// The element kind a tensor must be stored as.
enum class Stored { real, integer };

// One dump directory: its manifest, its files by step, its scenario when it records one.
struct Dump {
  std::string dir, role;  // role: "reference" or "candidate", for errors
  nlohmann::json manifest;
  std::map<int64_t, std::string> files;  // step -> file; -1: the initial parameters
  std::optional<Scenario> scenario;
  int64_t max_file_bytes = int64_t{1} << 40;  // set from the reference's model (bound_files)

  // Reads DIR/manifest.json (bounded, a regular file) and checks its entries' names.
  static Dump open(const std::string& dir, const std::string& role);
  // The bound on every file of this dump: twice a step of model c, plus 16 MiB.
  void bound_files(const ModelConfig& c);
  // The file of `step` (-1: the initial parameters), read within the bound; `other`: the
  // reference, whose file of the same step this one must not be.
  SafetensorsFile file(int64_t step, const Dump* other = nullptr) const;
  // The step's recorded noise (bounds.h order, NaN: not measured); empty when the dump has
  // none. Refuses (ConfigError naming $.steps[k].noise.NAME) a value that is not a finite
  // non-negative number; holds one above noise_ceiling(p, i) at the ceiling.
  std::vector<double> noise(int64_t step, const Precision& p) const;
  // The manifest's record `key` of step `step` ($.steps[k].KEY; null when absent) and its JSON
  // path for errors; whether any step records `key`.
  std::pair<nlohmann::json, std::string> step_record(int64_t step, const std::string& key) const;
  bool records_replicas() const;
  // The file path of `step`, as errors name it.
  std::string path_of(int64_t step) const;
};

// A tensor of any float (Stored::real) or integer dtype as doubles; the wrong kind is refused.
std::vector<double> stored_doubles(const Dump& d, const SafetensorsFile& f, const std::string& where,
                                   const std::string& name, Stored kind);

// Throws DivergedError (exit 4) naming the step, the tensor and the element when a reference
// value is not finite.
void require_finite_reference(const Dump& ref, int64_t step, const std::string& name, const std::vector<double>& v);

}  // namespace parity
