#include "ckpt/inspect.h"

#include <cstdio>
#include <map>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "ckpt/checksum.h"
#include "core/error.h"

namespace parity::ckpt {
namespace {

std::string human(int64_t bytes) {
  char buf[32];
  if (bytes >= (int64_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  else if (bytes >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

}  // namespace

InspectReport inspect(const std::string& dir) { return check_checkpoint(dir, Depth::everything); }

std::string format_report(const InspectReport& r, bool verbose) {
  std::ostringstream o;
  o << "checkpoint " << r.dir << "\n";
  if (r.have_metadata) {
    const Metadata& md = r.md;
    const LayoutConfig& m = md.mesh;
    o << "  format version " << md.version << " (metadata checksum " << checksum_str(md.checksum) << "), step "
      << md.step << ", data position " << md.data_position << "\n";
    o << "  saved on " << describe_layout(m, LayoutText::full) << "\n";
    o << "  model " << md.model.dump() << "\n";
    int64_t total = 0;
    o << "  files:\n";
    for (const auto& f : md.files) {
      char line[160];
      std::snprintf(line, sizeof line, "    %-22s %12s  %s  (header %s)\n", f.file.c_str(), human(f.bytes).c_str(),
                    checksum_str(f.checksum).c_str(), checksum_str(f.header_checksum).c_str());
      o << line;
      total += f.bytes;
    }
    o << "  tensors (" << md.tensors.size() << ", " << human(total) << " in files):\n";
    for (const auto& t : md.tensors) {
      std::map<int, std::pair<int, int64_t>> per_rank;  // rank -> (chunks, bytes)
      for (const auto& c : t.chunks) {
        ++per_rank[c.rank].first;
        per_rank[c.rank].second += c.bytes;
      }
      o << "    " << t.name << "  " << dtype_name(t.dtype) << " " << shape_str(t.shape) << "  "
        << mesh::view_name(t.layout.view) << " " << mesh::layout_str(t.layout) << "\n      chunks per rank:";
      for (const auto& [rank, cb] : per_rank) o << " r" << rank << "=" << cb.first << "(" << human(cb.second) << ")";
      o << "\n";
      if (verbose)
        for (const auto& c : t.chunks) {
          o << "      " << c.key << " rank " << c.rank << " " << rect_str(c.rect) << " @" << c.offset << " +"
            << c.bytes;
          for (uint32_t s : c.checksums) o << " " << checksum_str(s);
          o << "\n";
        }
    }
  }
  for (const auto& p : r.problems) o << "  PROBLEM: " << p << "\n";
  o << (r.ok() ? "verdict: OK (metadata.json's checksum, every file header against it, every file and block "
                 "checksum verified)\n"
               : "verdict: CORRUPT (" + std::to_string(r.problems.size()) + " problem(s))\n");
  return o.str();
}

}  // namespace parity::ckpt
