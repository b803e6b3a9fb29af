// Faults: each corruption is refused with a message naming the file and the tensor, and
// inspect's verdict says CORRUPT; so is any edit of metadata.json (its own checksum, and its
// records against the rank files' headers); a save that fails or crashes never loses the
// previous checkpoint.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <tuple>
#include <utility>
#include <vector>

#include "ckpt/checksum.h"
#include "ckpt/inspect.h"
#include "ckpt/verify.h"
#include "ckpt_helpers.h"
#include "core/error.h"

namespace parity::ckpt {
namespace {

using testing::load_layout_wrong;
using testing::save_layout;
using testing::Scratch;

class Faults : public Scratch {
 protected:
  void SetUp() override {
    Scratch::SetUp();
    save_layout(path("c"), "dps2.tp2", 1);
    md_ = read_metadata(path("c"));
  }
  // The message of the error a load under `layout` throws ("" when it loads).
  template <class E> std::string load_error(const std::string& layout = "dps4") {
    try {
      load_layout_wrong(path("c"), layout, 1);
    } catch (const E& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("wrong exception type: ") + e.what();
    }
    return "";
  }
  static void expect_has(const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  }
  Metadata md_;
};

TEST_F(Faults, FlippedByteIsRefusedNamingFileAndTensor) {
  const ChunkMeta& c = md_.find("layers.1.moe.experts.w1")->chunks.at(0);
  {
    std::fstream f(path("c") + "/" + rank_file_name(c.rank), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(c.offset + 5);
    const char b = static_cast<char>(f.get());
    f.seekp(c.offset + 5);
    f.put(static_cast<char>(b ^ 0x01));
  }
  const std::string msg = load_error<IoError>();
  expect_has(msg, rank_file_name(c.rank) + ": checksum mismatch in tensor 'layers.1.moe.experts.w1'");
  const InspectReport r = inspect(path("c"));
  EXPECT_FALSE(r.ok());
  expect_has(format_report(r, false), "verdict: CORRUPT");
  expect_has(format_report(r, false), "file checksum mismatch");
}

TEST_F(Faults, TruncatedFileIsRefused) {
  std::filesystem::resize_file(path("c/rank2.safetensors"), md_.files[2].bytes - 100);
  const std::string msg = load_error<IoError>();
  expect_has(msg, "rank2.safetensors: truncated");
  expect_has(msg, "tensor '");
  EXPECT_FALSE(inspect(path("c")).ok());
}

TEST_F(Faults, DeletedRankFileIsRefused) {
  std::filesystem::remove(path("c/rank1.safetensors"));
  const std::string msg = load_error<IoError>();
  expect_has(msg, "rank1.safetensors: missing (tensor '");
  expect_has(format_report(inspect(path("c")), false), "rank1.safetensors: missing");
}

TEST_F(Faults, MissingMetadataIsRefused) {
  std::filesystem::remove(path("c/metadata.json"));
  expect_has(load_error<IoError>(), "metadata.json: missing");
  EXPECT_FALSE(inspect(path("c")).ok());
}

TEST_F(Faults, WrongModelConfigIsRefused) {
  // A checkpoint genuinely saved for another model: whole, but not this run's (ConfigError).
  testing::Ranks r = testing::make_ranks("dps2.tp2", 1);
  std::vector<const ShardedState*> ptrs;
  for (const auto& x : r.states) ptrs.push_back(&x->state());
  nlohmann::json other = testing::model_json();
  other["dim"] = 32;
  save_all(*r.mesh, ptrs, {10, 640, other}, path("c"));
  const std::string msg = load_error<ConfigError>();
  expect_has(msg, "metadata.json: $.model/dim: the checkpoint was saved for another model config");
  expect_has(msg, "checkpoint has 32, this run has 16");
}

// Two chunk records of one tensor in different files, with equal shapes: (tensor, i, j).
std::tuple<TensorMeta*, size_t, size_t> interchangeable(Metadata& md) {
  for (auto& t : md.tensors)
    for (size_t i = 0; i < t.chunks.size(); ++i)
      for (size_t j = i + 1; j < t.chunks.size(); ++j)
        if (t.chunks[i].rank != t.chunks[j].rank && t.chunks[i].rect.shape() == t.chunks[j].rect.shape())
          return {&t, i, j};
  return {nullptr, 0, 0};
}

TEST_F(Faults, SwappedChunkRecordsAreRefusedEvenWithAFreshChecksum) {
  // Each record keeps its rectangle but points at the other's bytes (rank, key, offset,
  // checksums): every pointer names intact bytes, and write_metadata gives metadata.json a
  // checksum that matches its content. Only the rank files' headers can tell.
  Metadata md = md_;
  auto [t, i, j] = interchangeable(md);
  ASSERT_NE(t, nullptr);
  ChunkMeta &a = t->chunks[i], &b = t->chunks[j];
  std::swap(a.rank, b.rank);
  std::swap(a.key, b.key);
  std::swap(a.offset, b.offset);
  std::swap(a.checksums, b.checksums);
  write_metadata(path("c"), md);
  // b now points into the lower rank's file, checked first
  const std::string msg = load_error<IoError>();
  expect_has(msg, rank_file_name(b.rank) + ": tensor '" + t->name + "' chunk " + b.key +
                      ": metadata.json disagrees with the file's header on rect (metadata.json " + rect_str(b.rect) +
                      ", file " + rect_str(a.rect) + ")");
  const std::string report = format_report(inspect(path("c")), false);
  expect_has(report, rank_file_name(a.rank) + ": tensor '" + t->name + "' chunk " + a.key +
                         ": metadata.json disagrees with the file's header on rect (metadata.json " +
                         rect_str(a.rect) + ", file " + rect_str(b.rect) + ")");
  expect_has(report, "verdict: CORRUPT");
}

TEST_F(Faults, ConsistentStepEditIsRefused) {
  Metadata md = md_;
  md.step = 11;
  md.data_position = 704;
  write_metadata(path("c"), md);
  expect_has(load_error<IoError>(), "rank0.safetensors: metadata.json disagrees with the file's header on step "
                                    "(metadata.json 11, file 10), data_position (metadata.json 704, file 640)");
}

TEST_F(Faults, AnEditOfAnyMeshKeyIsRefused) {
  // Every key of the checkpoint's mesh record, the pipeline's included, is checked against the
  // rank files' headers. No run record here, so no run checksum can stand in for the check; the
  // edit recomputes metadata.json's own checksum, so only the headers can tell. Each edit keeps
  // the world's product (write_metadata builds the mesh): dps2.tp2 is world 4.
  ASSERT_TRUE(md_.run.is_null());
  const std::vector<std::pair<std::function<void(LayoutConfig&)>, std::string>> edits = {
      {[](LayoutConfig& l) { l.tp = 1, l.dp_shard = 4; }, "mesh.tp (metadata.json 1, file 2)"},
      {[](LayoutConfig& l) { l.order = RankOrder::deepspeed; }, "mesh.order (metadata.json deepspeed, file megatron)"},
      {[](LayoutConfig& l) { l.pp = 2, l.dp_shard = 1; }, "mesh.pp (metadata.json 2, file 1)"},
      {[](LayoutConfig& l) { l.pp_virtual = 2; }, "mesh.pp_virtual (metadata.json 2, file 1)"},
      {[](LayoutConfig& l) { l.pp_layers = {1, 1}; }, "mesh.pp_layers (metadata.json [1,1], file even)"},
  };
  for (const auto& [edit, want] : edits) {
    Metadata md = md_;
    edit(md.mesh);
    write_metadata(path("c"), md);
    const CheckReport rep = check_checkpoint(path("c"), Depth::headers);
    if (rep.problems.empty()) {
      ADD_FAILURE() << want << ": the edited checkpoint verified";
      continue;
    }
    expect_has(rep.problems.front(), "rank0.safetensors: metadata.json disagrees with the file's header on ");
    expect_has(rep.problems.front(), want);
    expect_has(load_error<IoError>(), want);
  }
  write_metadata(path("c"), md_);  // the control: the same write, unedited, verifies
  EXPECT_TRUE(check_checkpoint(path("c"), Depth::headers).ok());
}

TEST_F(Faults, DuplicatedChunkRecordIsRefused) {
  // One record copied over another of the same shape: the tensor's element count still adds up.
  Metadata md = md_;
  auto [t, i, j] = interchangeable(md);
  ASSERT_NE(t, nullptr);
  const ChunkMeta dropped = t->chunks[j];
  t->chunks[j] = t->chunks[i];
  write_metadata(path("c"), md);
  const std::string report = format_report(inspect(path("c")), false);
  expect_has(report, "chunk " + t->chunks[i].key + ": listed again in metadata.json");
  expect_has(report, rank_file_name(dropped.rank) + ": tensor '" + t->name + "' chunk " + dropped.key +
                         ": in the file but not in metadata.json");
  EXPECT_FALSE(load_error<IoError>().empty());
}

std::string read_text(const std::string& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_text(const std::string& p, const std::string& text) { std::ofstream(p, std::ios::trunc) << text; }

TEST_F(Faults, AnEditOfMetadataAloneIsCaughtByItsChecksum) {
  // A file checksum (which no header records) edited by hand: metadata.json's own checksum
  // is the only witness a load has.
  const std::string p = path("c/metadata.json");
  std::string text = read_text(p);
  const std::string was = checksum_str(md_.files[0].checksum);
  text.replace(text.find(was), was.size(), checksum_str(md_.files[0].checksum ^ 1u));
  write_text(p, text);
  expect_has(load_error<IoError>(), "metadata.json: checksum mismatch: it says " + checksum_str(md_.checksum));
}

TEST_F(Faults, ReformattedMetadataStillLoads) {
  // The checksum is of the canonical content: other whitespace and key order verify.
  const std::string p = path("c/metadata.json");
  write_text(p, nlohmann::json::parse(read_text(p)).dump(4));
  EXPECT_EQ(load_error<Error>(), "");
  EXPECT_TRUE(inspect(path("c")).ok());
}

TEST_F(Faults, AVersion1CheckpointIsRefused) {
  const std::string p = path("c/metadata.json");
  nlohmann::json j = nlohmann::json::parse(read_text(p));
  j["version"] = 1;
  j.erase("checksum");
  write_text(p, j.dump(1));
  expect_has(load_error<IoError>(), "metadata.json: $.version: is 1, this build reads version 2 only");
}

TEST_F(Faults, AFlippedHeaderByteIsRefused) {
  {
    std::fstream f(path("c/rank2.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('#');
  }
  expect_has(load_error<IoError>(), "rank2.safetensors: header checksum mismatch: metadata.json says " +
                                        checksum_str(md_.files[2].header_checksum));
}

TEST_F(Faults, DtypeMismatchAndMissingTensorAreRefused) {
  const mesh::Mesh w1{LayoutConfig{}};
  Tensor<float> f;
  ShardedState st;
  st.add("final_ln.weight", {16}, mesh::replicated(mesh::View::dense), f);
  const Checkpoint ck = Checkpoint::open(path("c"));
  try {
    load_rank(ck, w1, st, 0, testing::model_json());
    ADD_FAILURE() << "fp32 load of an fp64 tensor";
  } catch (const ConfigError& e) {
    expect_has(e.what(), "tensor 'final_ln.weight': dtype mismatch: saved as fp64, this run loads fp32");
  }
  Tensor<double> d;
  ShardedState st2;
  st2.add("no.such.tensor", {3}, mesh::replicated(mesh::View::dense), d);
  try {
    load_rank(ck, w1, st2, 0, testing::model_json());
    ADD_FAILURE() << "a missing tensor was loaded";
  } catch (const ConfigError& e) {
    expect_has(e.what(), "tensor 'no.such.tensor': missing");
  }
}

TEST_F(Faults, AFailedSaveLeavesThePreviousCheckpoint) {
  const auto before = testing::snapshot(path("c"));
  const mesh::Mesh w1{LayoutConfig{}};
  Tensor<double> t({4}), wrong_shape({3});
  ShardedState st;
  st.add("ok", {4}, mesh::replicated(mesh::View::dense), t);
  st.add("bad", {4}, mesh::replicated(mesh::View::dense), wrong_shape);
  EXPECT_THROW(save_all(w1, {&st}, {}, path("c")), Error);
  EXPECT_EQ(testing::snapshot(path("c")), before);
  for (const auto& e : std::filesystem::directory_iterator(root_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

// Runs save_all of salt 2 over path("c") in a child with PARITY_CKPT_CRASH set; the child
// must die at that point (exit 86).
void crash_in_child(const std::string& dir, const std::string& point, bool no_exchange) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("PARITY_CKPT_CRASH", point.c_str(), 1);
    if (no_exchange) setenv("PARITY_CKPT_NO_EXCHANGE", "1", 1);
    save_layout(dir, "dps2.tp2", 2);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 86) << "the crash hook did not fire at " << point;
}

TEST_F(Faults, CrashBetweenTheTwoRenamesKeepsThePreviousLoadable) {
  const auto before = testing::snapshot(path("c"));
  crash_in_child(path("c"), "0:between_renames", true);
  EXPECT_FALSE(std::filesystem::exists(path("c")));  // the crash fell between the renames
  EXPECT_EQ(resolve(path("c")), path("c.old"));
  EXPECT_EQ(load_layout_wrong(path("c"), "dps4", 1), 0);  // the previous one, via c.old
  recover(path("c"));
  EXPECT_EQ(testing::snapshot(path("c")), before);
  EXPECT_FALSE(std::filesystem::exists(path("c.old")));
  for (const auto& e : std::filesystem::directory_iterator(root_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST_F(Faults, CrashAfterTheExchangeHasTheNewCheckpoint) {
  crash_in_child(path("c"), "0:exchanged", false);
  EXPECT_EQ(load_layout_wrong(path("c"), "dps4", 2), 0);
  recover(path("c"));  // removes the previous one, left under the temporary name
  EXPECT_EQ(load_layout_wrong(path("c"), "dps1", 2), 0);
  for (const auto& e : std::filesystem::directory_iterator(root_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST_F(Faults, SaveReplacesAndRecoversLeftovers) {
  std::filesystem::create_directory(path("c.tmp-dead"));  // a crashed save's leftovers
  save_layout(path("c"), "dps1", 3);
  EXPECT_EQ(load_layout_wrong(path("c"), "dps2.tp2", 3), 0);
  EXPECT_FALSE(std::filesystem::exists(path("c.tmp-dead")));
}

}  // namespace
}  // namespace parity::ckpt
