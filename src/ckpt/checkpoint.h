// Distributed checkpoints that reshard across layouts (docs/ckpt.md).
//
// The unit is a named global tensor that every rank holds as its local shard under a
// mesh::TensorLayout (the same description the parallel code and mesh::param_layout use):
//
//   ckpt::ShardedState st;
//   st.add("layers.0.attn.wq", spec.shape, mesh::param_layout(m, spec), local_wq);  // Tensor<T>&
//   st.add("optim.step", {}, mesh::replicated(mesh::View::dense), step_tensor);
//   ckpt::save(world, m, st, {.step = 10, .data_position = 640, .model = model_json}, "ckpt/run");
//   ...
//   ckpt::load(world, other_mesh, st2, model_json, "ckpt/run");  // any layout, any world size
//
// save() writes each rank's own chunks (a replicated element only by its first replica) to
// DIR.tmp-<nonce>, then metadata.json, fsyncs everything and swaps the directory into place
// atomically; a crash at any point leaves the previous DIR whole. load() checks metadata.json
// against its own checksum and every rank file's header (verify.h), then reads, on each rank,
// only the checksum blocks of the chunks that intersect its shard, verifies them and
// copies them bitwise into the local tensors, which it resizes to the target local shape.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/format.h"
#include "ckpt/verify.h"
#include "comm/communicator.h"
#include "core/output.h"
#include "core/tensor.h"
#include "mesh/mesh.h"
#include "mesh/placement.h"

namespace parity::ckpt {

struct StateEntry {
  std::string name;
  DType dtype = DType::f64;
  Shape shape;          // global
  mesh::TensorLayout layout;  // how the local tensor is placed on the mesh (no Partial)
  std::variant<Tensor<float>*, Tensor<double>*, Tensor<int64_t>*> local;

  const void* data() const;
  Shape local_shape() const;
  void* resize(const Shape& s) const;  // reshapes the local tensor (zeros) and returns its data
};

// Named global tensors, each pointing at this rank's local shard (not owned: the tensors
// must outlive the state). save() reads them; load() resizes and fills them.
class ShardedState {
 public:
  // Throws Error on a duplicate or empty name.
  template <class T> void add(const std::string& name, const Shape& global_shape, const mesh::TensorLayout& layout,
                              Tensor<T>& local) {
    check_new(name);
    entries_.push_back({name, dtype_of<T>(), global_shape, layout, &local});
  }
  const std::vector<StateEntry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  void check_new(const std::string& name) const;
  std::vector<StateEntry> entries_;
};

struct CheckpointInfo {
  int64_t step = 0;           // opaque to the checkpoint: the caller's own counters
  int64_t data_position = 0;
  nlohmann::json model;       // the model config (e.g. scenario_to_json(s)["model"]); compared on load
  // The rest of what decides the trajectory (harness/scenario/scenario.h checkpoint_run: seeds,
  // optimizer and its settings, precision, the saving layout); null: not recorded (tools,
  // synthetic states). Compared on load when the loader passes its own (check_run).
  nlohmann::json run = nullptr;
};

// Collective over `world` (world.size() == m.world()). Throws IoError (naming the file) when
// any rank fails to write; Error for an inconsistent state (a Partial placement, a local
// tensor whose shape is not local_shape). DIR's parent must exist and be shared by all ranks.
void save(comm::Communicator& world, const mesh::Mesh& m, const ShardedState& state, const CheckpointInfo& info,
          const std::string& dir);

// Collective over `world`. Fills every tensor of `state` with its shard under `m` and the
// entry's layout. Throws ConfigError for a different model config, a missing tensor, a dtype
// or shape mismatch; IoError for a missing, truncated or corrupt file (naming file and
// tensor), and for a metadata.json that disagrees with itself or a file (verify.h). Tensors
// in the checkpoint but not in `state` are ignored. Returns the saved info.
// `run`: the loader's identity (CheckpointInfo::run), checked by check_run before any tensor
// is read; null: not checked.
CheckpointInfo load(comm::Communicator& world, const mesh::Mesh& m, ShardedState& state, const nlohmann::json& model,
                    const std::string& dir, const nlohmann::json& run = nullptr);

// ---- the pieces, without communication (save_all / tools / tests drive them directly) ----

// Rank `rank`'s file in `dir` (rank<r>.safetensors, fsynced) and the records of its chunks.
struct RankRecord {
  FileMeta file;
  std::vector<std::vector<ChunkMeta>> chunks;  // per state entry, in state order
};
// The file's header records `info` and every chunk it holds (format.h, RankRecordHeader).
RankRecord write_rank_file(const std::string& dir, const mesh::Mesh& m, const ShardedState& state,
                           const CheckpointInfo& info, int rank);
std::string record_to_string(const RankRecord& r);
RankRecord record_from_string(const std::string& s);

// metadata.json's content from every rank's record (records[r] is rank r's).
Metadata make_metadata(const mesh::Mesh& m, const ShardedState& state, const CheckpointInfo& info,
                       const std::vector<RankRecord>& records);

// Saves the states of every rank (states[r] is rank r's) from one process: the same files
// and the same atomic replace as save(). For the W = 1 seed, tools and tests.
void save_all(const mesh::Mesh& m, const std::vector<const ShardedState*>& states, const CheckpointInfo& info,
              const std::string& dir);

// One writer per checkpoint directory (core/output.h DirLock on DIR/.parity-lock, the file
// commit() carries into each new checkpoint): created when missing (its parent must exist).
// Nothing is locked when the environment's kLockHeldEnv names `dir` (absolute): the launcher
// of this rank holds it for the whole run. A directory another writer holds: ConfigError.
inline constexpr const char* kLockHeldEnv = "PARITY_CKPT_LOCK_HELD";
DirLock lock_checkpoint_dir(const std::string& option, const std::string& dir);

// "<dir>.tmp-<nonce>" (a fresh, unique suffix) and "<dir>.old".
std::string make_temp_dir(const std::string& dir);
std::string old_dir(const std::string& dir);
// Replaces `dir` by `tmp` atomically (renameat2 RENAME_EXCHANGE, else dir -> dir.old,
// tmp -> dir, both fsynced), then removes the previous checkpoint. What `dir` holds besides
// parity's files (metadata.json, rankN.safetensors) is hard-linked into `tmp` first and kept.
void commit(const std::string& tmp, const std::string& dir);
// After a crash: puts a whole "<dir>.old" back when `dir` is missing, removes a "<dir>.old"
// that `dir` replaced, and removes every "<dir>.tmp-*". Safe to call when nothing is left over.
void recover(const std::string& dir);
// The directory a reader should use: `dir`, or "<dir>.old" when a crash fell between the
// two renames of commit(). Throws IoError when neither holds a metadata.json. Never writes.
std::string resolve(const std::string& dir);

// Fills rank `rank`'s tensors of `state` from a verified checkpoint (Checkpoint::open,
// verify.h), verifying every block it reads. Checks the model config first. Throws as load().
void load_rank(const Checkpoint& ck, const mesh::Mesh& m, ShardedState& state, int rank, const nlohmann::json& model,
               const nlohmann::json& run = nullptr);

// Throws ConfigError "<where>: $.model<pointer>: checkpoint has X, this run has Y" when differ.
void check_model(const nlohmann::json& saved, const nlohmann::json& expected, const std::string& where);

// The run identity (CheckpointInfo::run) of a checkpoint against the loader's; nothing when
// `expected` is null. Every member but "layout" must agree (a resume under another layout is
// what parity checks). Throws ConfigError "<where>: $.run.optim.lr: the checkpoint was saved
// by a run with another optim.lr: checkpoint has 0.01, this run has 0.5 (1 difference(s))";
// a checkpoint without "run" (saved before it was recorded) is refused, exit 2.
void check_run(const nlohmann::json& saved, const nlohmann::json& expected, const std::string& where);

}  // namespace parity::ckpt
