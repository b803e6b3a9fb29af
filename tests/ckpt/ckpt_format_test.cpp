// Checksums, chunk geometry and metadata of the checkpoint format.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "ckpt/checksum.h"
#include "ckpt/chunks.h"
#include "ckpt/format.h"
#include "ckpt_helpers.h"
#include "core/error.h"
#include "thrown.h"

namespace parity::ckpt {
namespace {

using testing::Scratch;

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c_portable("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  EXPECT_EQ(checksum_str(0xE3069283u), "crc32c:e3069283");
}

TEST(Crc32c, HardwareAndPortableAgreeAndChain) {
  std::mt19937_64 rng(7);
  std::vector<unsigned char> buf(5000);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (size_t n : {0, 1, 7, 8, 9, 63, 64, 65, 4999, 5000}) {
    EXPECT_EQ(crc32c(buf.data(), n), crc32c_portable(buf.data(), n)) << n;
    const size_t h = n / 3;
    EXPECT_EQ(crc32c(buf.data() + h, n - h, crc32c(buf.data(), h)), crc32c(buf.data(), n)) << n;
  }
  std::vector<unsigned char> flipped = buf;
  flipped[1234] ^= 0x10;
  EXPECT_NE(crc32c(flipped.data(), flipped.size()), crc32c(buf.data(), buf.size()));
}

mesh::Mesh mesh_of(int64_t dps, int64_t tp) {
  LayoutConfig l;
  l.dp_shard = dps;
  l.tp = tp;
  l.world = dps * tp;
  return mesh::Mesh(l);
}

TEST(Chunks, StridedShardIsSeveralRectangles) {
  // 8 rows, StridedShard(0, 2) on dp_shard 2 alone: rank 0 holds rows 0-1 and 4-5.
  const mesh::Mesh m = mesh_of(2, 1);
  const mesh::TensorLayout l{mesh::View::dense,
                             {mesh::Placement::replicate(), mesh::Placement::strided_shard(0, 2),
                              mesh::Placement::replicate(), mesh::Placement::replicate()}};
  const auto c0 = shard_chunks(m, l, {8, 3}, 0);
  ASSERT_EQ(c0.size(), 2u);
  EXPECT_EQ(c0[0].rect, (Rect{{{0, 2}, {0, 3}}}));
  EXPECT_EQ(c0[1].rect, (Rect{{{4, 6}, {0, 3}}}));
  EXPECT_EQ(c0[1].local_begin, (std::vector<int64_t>{2, 0}));
  // FOLDINGS.md's example: (StridedShard(0, 2), Shard(0)) on (dp_shard 2, tp 2): one range each.
  const mesh::Mesh m4 = mesh_of(2, 2);
  const mesh::TensorLayout l4{mesh::View::dense,
                              {mesh::Placement::replicate(), mesh::Placement::strided_shard(0, 2),
                               mesh::Placement::replicate(), mesh::Placement::shard(0)}};
  EXPECT_EQ(shard_chunks(m4, l4, {8}, 1)[0].rect, (Rect{{{4, 6}}}));
  EXPECT_EQ(shard_chunks(m4, l4, {8}, 2)[0].rect, (Rect{{{2, 4}}}));
}

TEST(Chunks, OnlyTheFirstReplicaWritesAndPartialIsRefused) {
  const mesh::Mesh m = mesh_of(2, 2);
  const mesh::TensorLayout l{mesh::View::dense,
                             {mesh::Placement::replicate(), mesh::Placement::shard(0), mesh::Placement::replicate(),
                              mesh::Placement::replicate()}};
  EXPECT_TRUE(writes_shard(m, l, "x", 0));
  EXPECT_FALSE(writes_shard(m, l, "x", 1));  // tp coordinate 1: a replica
  EXPECT_TRUE(writes_shard(m, l, "x", 2));
  const mesh::TensorLayout p{mesh::View::dense,
                             {mesh::Placement::replicate(), mesh::Placement::partial(), mesh::Placement::replicate(),
                              mesh::Placement::replicate()}};
  EXPECT_THROW(writes_shard(m, p, "x", 0), Error);
}

TEST(Chunks, EmptyShardsWriteNothingAndScalarsAreOneChunk) {
  const mesh::Mesh m = mesh_of(4, 1);
  const mesh::TensorLayout l{mesh::View::dense,
                             {mesh::Placement::replicate(), mesh::Placement::shard(0), mesh::Placement::replicate(),
                              mesh::Placement::replicate()}};
  EXPECT_TRUE(shard_chunks(m, l, {2, 5}, 3).empty());  // ceil(2/4) = 1 row each: ranks 2, 3 empty
  EXPECT_EQ(shard_chunks(m, mesh::replicated(mesh::View::dense), {}, 0).size(), 1u);
}

TEST(Chunks, ExtractThenScatterIsBitwise) {
  // A (6, 5) tensor under StridedShard(0, 2) on dp_shard 2: chunks of 3 rows split 2 + 1,
  // so rank 1 holds rows 2 and 5 (two uneven rectangles).
  const mesh::Mesh m = mesh_of(2, 1);
  const mesh::TensorLayout l{mesh::View::dense,
                             {mesh::Placement::replicate(), mesh::Placement::strided_shard(0, 2),
                              mesh::Placement::replicate(), mesh::Placement::replicate()}};
  const Shape g{6, 5};
  const auto idx = mesh::global_indices(m, l, g, 1);
  const Shape ls = mesh::local_shape(m, l, g, 1);
  std::vector<double> local(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) local[i] = static_cast<double>(idx[i]);
  // Rebuild the global tensor's rows held by rank 1 from its chunks, then scatter back into
  // a W1 local (the whole tensor) and into rank 1's local.
  std::vector<double> whole(30, -1.0), again(local.size(), -1.0);
  const auto all = mesh::local_dim_indices(mesh::Mesh(LayoutConfig{}), mesh::replicated(mesh::View::dense), g, 0);
  const auto mine = mesh::local_dim_indices(m, l, g, 1);
  for (const auto& c : shard_chunks(m, l, g, 1)) {
    std::vector<double> buf(static_cast<size_t>(c.rect.numel()));
    extract_chunk(local.data(), ls, c, 8, buf.data());
    const Overlap ow = overlap(all, c.rect), om = overlap(mine, c.rect);
    scatter_overlap(ow, c.rect, 0, buf.data(), g, 8, whole.data());
    const int64_t row0 = om.first_row();
    scatter_overlap(om, c.rect, row0, buf.data() + row0 * 5, ls, 8, again.data());
  }
  for (int64_t i : idx) EXPECT_EQ(whole[static_cast<size_t>(i)], static_cast<double>(i));
  EXPECT_EQ(again, local);
}

TEST(Format, PlacementStringsRoundTrip) {
  for (const auto& p : {mesh::Placement::replicate(), mesh::Placement::shard(2), mesh::Placement::strided_shard(0, 4),
                        mesh::Placement::partial()})
    EXPECT_EQ(parse_placement(mesh::placement_str(p)), p);
  EXPECT_THROW(parse_placement("Shard(x)"), Error);
}

class FormatFiles : public Scratch {};

// A dense layout written before the cp dimension existed, (dp_replicate, dp_shard, tp) with
// three placements, reads as the same layout with Replicate on cp (docs/ckpt.md).
TEST_F(FormatFiles, ThreeDimensionalDenseLayoutsReadWithCpReplicated) {
  testing::save_layout(path("c"), "dps2.tp2", 1);
  nlohmann::json j = nlohmann::json::parse(metadata_to_json(read_metadata(path("c"))).dump());
  bool edited = false;
  for (auto& t : j["tensors"])
    if (t["name"] == "layers.0.attn.wq") {
      t["layout"]["placements"] = {"Replicate", "Shard(0)", "Shard(1)"};
      t["layout"]["mesh_dims"] = {"dp_replicate", "dp_shard", "tp"};
      t["layout"]["mesh"] = {1, 2, 2};
      edited = true;
    }
  ASSERT_TRUE(edited);
  const Metadata md = metadata_from_json(j, "old");
  EXPECT_EQ(md.mesh.cp, 1);
  EXPECT_EQ(mesh::layout_str(md.find("layers.0.attn.wq")->layout), "(Replicate, Shard(0), Replicate, Shard(1))");
}

TEST_F(FormatFiles, MetadataRoundTripsAndNamesEveryChunk) {
  testing::save_layout(path("c"), "dps2.tp2", 1);
  const Metadata md = read_metadata(path("c"));
  EXPECT_EQ(md.step, 10);
  EXPECT_EQ(md.data_position, 640);
  EXPECT_EQ(md.mesh.world, 4);
  ASSERT_EQ(md.files.size(), 4u);
  const TensorMeta* wq = md.find("layers.0.attn.wq");
  ASSERT_NE(wq, nullptr);
  EXPECT_EQ(mesh::layout_str(wq->layout), "(Replicate, Shard(0), Replicate, Shard(1))");
  EXPECT_EQ(wq->chunks.size(), 4u);  // FSDP x TP: one rectangle per rank
  const Metadata again = metadata_from_json(nlohmann::json::parse(metadata_to_json(md).dump()), "x");
  EXPECT_EQ(metadata_to_json(again), metadata_to_json(md));
  // every chunk's offset agrees with the rank file's own safetensors header
  for (const auto& t : md.tensors)
    for (const auto& c : t.chunks) {
      const RankHeader h = read_rank_header(path("c") + "/" + rank_file_name(c.rank));
      ASSERT_TRUE(h.entries.count(c.key)) << c.key;
      EXPECT_EQ(h.entries.at(c.key).offset, c.offset) << c.key;
    }
}

// The rank order is recorded (metadata and every rank file's header) only when it is not
// megatron, and reads back.
TEST_F(FormatFiles, RankOrderIsRecordedWhenNotTheDefault) {
  testing::save_layout(path("d"), "dps2.tp2.ep2.ds1", 1);
  const Metadata md = read_metadata(path("d"));
  EXPECT_EQ(md.mesh.order, RankOrder::deepspeed);
  EXPECT_EQ(metadata_to_json(md).at("mesh").at("order"), "deepspeed");
  const RankHeader h = read_rank_header(path("d") + "/" + rank_file_name(1));
  EXPECT_EQ(rank_record_from(h, "r1").mesh.order, RankOrder::deepspeed);
  testing::save_layout(path("m"), "dps2.tp2.ep2", 1);
  EXPECT_FALSE(metadata_to_json(read_metadata(path("m"))).at("mesh").contains("order"));
  // with context parallel both are recorded and read back
  testing::save_layout(path("c"), "cp2.tp2.ep4.ds1", 1);
  const Metadata mc = read_metadata(path("c"));
  EXPECT_EQ(mc.mesh.order, RankOrder::deepspeed);
  EXPECT_EQ(mc.mesh.cp, 2);
  EXPECT_EQ(metadata_to_json(mc).at("mesh").at("cp"), 2);
  const RankHeader hc = read_rank_header(path("c") + "/" + rank_file_name(3));
  EXPECT_EQ(rank_record_from(hc, "r3").mesh.cp, 2);
  EXPECT_EQ(rank_record_from(hc, "r3").mesh.order, RankOrder::deepspeed);
}

TEST_F(FormatFiles, BigChunksAreChecksummedPerBlockOfRows) {
  // lm_head (16, 64) fp64 is 8 KiB: one block; a chunk's block_rows follows kBlockBytes.
  testing::save_layout(path("c"), "dps1", 1);
  const Metadata md = read_metadata(path("c"));
  const auto& c = md.find("embed.weight")->chunks.at(0);
  EXPECT_EQ(c.block_rows, kBlockBytes / (16 * 8));
  EXPECT_EQ(c.checksums.size(), 1u);
}

// Every problem the two parsers meet is an IoError naming where it was read: nlohmann's own
// exceptions as "malformed", a typed Error with its message, an IoError from inside as it is
// (not named twice).
using parity::testing::io_error;

TEST_F(FormatFiles, MetadataProblemsAreIoErrorsNamingWhere) {
  testing::save_layout(path("c"), "dps2.tp2", 1);
  const nlohmann::json good = nlohmann::json::parse(metadata_to_json(read_metadata(path("c"))).dump());
  nlohmann::json j = good;
  j.erase("step");
  EXPECT_EQ(io_error([&] { metadata_from_json(j, "md"); }),
            "md: malformed metadata: [json.exception.out_of_range.403] key 'step' not found");
  j = good;
  j["mesh"]["order"] = "torus";
  EXPECT_EQ(io_error([&] { metadata_from_json(j, "md"); }),
            "md: $.mesh.order: expected one of \"megatron\", \"deepspeed\", got string \"torus\"");
  j = good;
  j["format"] = "other";
  EXPECT_EQ(io_error([&] { metadata_from_json(j, "md"); }), "md: $.format: is not parity-checkpoint");
}

TEST_F(FormatFiles, RankRecordProblemsAreIoErrorsNamingWhere) {
  testing::save_layout(path("c"), "dps2.tp2", 1);
  const RankHeader good = read_rank_header(path("c") + "/" + rank_file_name(1));
  ASSERT_NO_THROW(rank_record_from(good, "r1"));
  RankHeader h = good;
  h.metadata["step"] = "\"ten\"";
  EXPECT_EQ(io_error([&] { rank_record_from(h, "r1"); }),
            "r1: header __metadata__: malformed: [json.exception.type_error.302] type must be number, but is string");
  h = good;
  nlohmann::json m = nlohmann::json::parse(h.metadata.at("mesh"));
  m["order"] = "torus";
  h.metadata["mesh"] = m.dump();
  EXPECT_EQ(io_error([&] { rank_record_from(h, "r1"); }),
            "r1: header __metadata__: $.mesh.order: expected one of \"megatron\", \"deepspeed\", got string \"torus\"");
  h = good;
  h.metadata["step"] = "1.5";
  EXPECT_EQ(io_error([&] { rank_record_from(h, "r1"); }),
            "r1: header __metadata__: step: holds the number 1.5 where integers belong");
}

}  // namespace
}  // namespace parity::ckpt
