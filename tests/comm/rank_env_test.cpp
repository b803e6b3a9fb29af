// The rank's identity and rendezvous from torchrun-style, Slurm and MPI environments
// (comm/rank_env.h), and Slurm's host list and tasks-per-node parsers.
#include <gtest/gtest.h>

#include <map>

#include "comm/rank_env.h"
#include "comm/torch_store.h"
#include "core/error.h"

using namespace parity;
using namespace parity::comm;

namespace {

using Env = std::map<std::string, std::string>;

RankEnv parse(const Env& vars) {
  return parse_rank_env([&](const std::string& n) -> std::optional<std::string> {
    auto it = vars.find(n);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

// The ConfigError's path (the variable it names); "" when nothing was thrown.
std::string refused(const Env& vars) {
  try {
    parse(vars);
  } catch (const ConfigError& e) {
    return e.path();
  }
  return "";
}

std::string hosts(const std::string& list) {
  std::string out;
  for (const auto& h : parse_hostlist(list)) out += (out.empty() ? "" : " ") + h;
  return out;
}

}  // namespace

TEST(RankEnv, NothingSetIsAWorldOfOne) {
  RankEnv e = parse({});
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.source, "none");
  EXPECT_EQ(e.rendezvous, RendezvousKind::local);
  EXPECT_EQ(e.backend, Backend::gloo);
}

TEST(RankEnv, TorchrunStyleWithMasterUsesTheTcpStore) {
  RankEnv e = parse({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                     {"MASTER_ADDR", "10.213.0.1"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.source, "RANK");
  EXPECT_EQ(e.rendezvous, RendezvousKind::tcp);
  EXPECT_EQ(e.master_addr, "10.213.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.master_from, "MASTER_ADDR");
}

TEST(RankEnv, TorchrunsAgentStoreWhenItSaysSo) {
  // torchrun's static rendezvous: its agent serves a store on MASTER_PORT (issue 30)
  const Env agent{{"RANK", "1"},
                  {"WORLD_SIZE", "4"},
                  {"MASTER_ADDR", "10.0.0.1"},
                  {"MASTER_PORT", "29500"},
                  {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                  {"TORCHELASTIC_RUN_ID", "job-7"},
                  {"TORCHELASTIC_RESTART_COUNT", "2"}};
  RankEnv e = parse(agent);
  EXPECT_EQ(e.rendezvous, RendezvousKind::torch);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.store_prefix, "/parity/job-7/attempt_2/");
  EXPECT_EQ(e.torch_protocol, 0) << "0: the agent's torch decides";
  Env v = agent;
  v["PARITY_TORCH_STORE"] = "2";
  EXPECT_EQ(parse(v).torch_protocol, 2);
  v["PARITY_TORCH_STORE"] = "3";
  EXPECT_EQ(refused(v), "PARITY_TORCH_STORE");
  v = agent, v["TORCHELASTIC_RUN_ID"] = "a/b";
  EXPECT_EQ(refused(v), "TORCHELASTIC_RUN_ID") << "the run id goes into the keys";
  v = agent, v.erase("TORCHELASTIC_RUN_ID"), v.erase("TORCHELASTIC_RESTART_COUNT");
  EXPECT_EQ(parse(v).store_prefix, "/parity/none/attempt_0/");
  v = agent, v["TORCHELASTIC_USE_AGENT_STORE"] = "False";  // --standalone, c10d on torch 1.13
  EXPECT_EQ(parse(v).rendezvous, RendezvousKind::tcp);
  v = agent, v["PARITY_STORE"] = "redis://cache01/r1";
  EXPECT_EQ(parse(v).rendezvous, RendezvousKind::redis) << "an explicit Redis store wins";
}

TEST(TorchStore, ProtocolFromTheAgentsTorchVersion) {
  EXPECT_EQ(torch_store_protocol("1.13.0a0"), 1);
  EXPECT_EQ(torch_store_protocol("2.1.2"), 1);
  EXPECT_EQ(torch_store_protocol("2.2.0"), 2);
  EXPECT_EQ(torch_store_protocol("2.4.1+cu121"), 2);
  EXPECT_EQ(torch_store_protocol("10.0"), 2);
  EXPECT_EQ(torch_store_protocol(""), 0);
  EXPECT_EQ(torch_store_protocol("unknown"), 0);
}

TEST(RankEnv, AStoreDirectoryWinsOverTheMaster) {
  // `parity launch` on one host sets PARITY_STORE_DIR; a MASTER_ADDR left in the shell is ignored.
  RankEnv e = parse({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"PARITY_STORE_DIR", "/tmp/x"}, {"MASTER_ADDR", "h"}});
  EXPECT_EQ(e.rendezvous, RendezvousKind::file);
  EXPECT_TRUE(e.master_addr.empty());
}

TEST(RankEnv, MpirunIdentityAndBootstrap) {
  Env mpi = {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  RankEnv e = parse(mpi);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.backend, Backend::mpi);
  EXPECT_EQ(e.rendezvous, RendezvousKind::mpi);
  mpi["PARITY_BACKEND"] = "gloo";
  EXPECT_EQ(parse(mpi).rendezvous, RendezvousKind::mpi) << "gloo bootstrapped over MPI";
  mpi["MASTER_ADDR"] = "10.0.0.1";
  mpi["MASTER_PORT"] = "1234";
  EXPECT_EQ(parse(mpi).rendezvous, RendezvousKind::tcp) << "an explicit master wins over the MPI bootstrap";
  mpi.erase("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(refused(mpi), "OMPI_COMM_WORLD_SIZE");
}

TEST(RankEnv, SlurmStepTakesTheFirstNodeAsMaster) {
  Env s = {{"SLURM_PROCID", "6"},  {"SLURM_NTASKS", "8"},          {"SLURM_LOCALID", "2"},
           {"SLURM_STEP_ID", "0"}, {"SLURM_NODELIST", "gpu[07-08]"}, {"SLURM_TASKS_PER_NODE", "4(x2)"},
           {"SLURM_NODEID", "1"},  {"SLURM_JOB_ID", "123456"}};
  RankEnv e = parse(s);
  EXPECT_EQ(e.source, "SLURM_PROCID");
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.rendezvous, RendezvousKind::tcp);
  EXPECT_EQ(e.master_addr, "gpu07");
  EXPECT_EQ(e.master_from, "SLURM_NODELIST");
  EXPECT_EQ(e.master_port, 15000 + 123456 % 10000);
  s["SLURM_STEP_NODELIST"] = "gpu08";
  EXPECT_EQ(parse(s).master_addr, "gpu08") << "the step's node list before the job's";
  s["MASTER_ADDR"] = "head";
  s["MASTER_PORT"] = "4000";
  EXPECT_EQ(parse(s).master_addr, "head");
  EXPECT_EQ(parse(s).master_port, 4000);
}

TEST(RankEnv, SlurmOutsideAStepIsNoRank) {
  // An sbatch script has SLURM_PROCID=0 and the job's SLURM_NTASKS, but is no task of a step.
  RankEnv e = parse({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_NODELIST", "n[1-2]"}});
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.source, "none");
}

TEST(RankEnv, PrecedenceTorchrunThenMpiThenSlurm) {
  Env all = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"},
             {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"},
             {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_STEP_ID", "0"}};
  EXPECT_EQ(parse(all).source, "RANK");
  all.erase("RANK");
  all.erase("WORLD_SIZE");
  EXPECT_EQ(parse(all).source, "OMPI_COMM_WORLD_RANK");
  all.erase("OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(parse(all).source, "SLURM_PROCID");
}

TEST(RankEnv, MissingOrInconsistentValuesNameTheVariable) {
  const Env base = {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}};
  EXPECT_EQ(refused(base), "");
  auto with = [&](const std::string& k, const std::string& v) {
    Env e = base;
    if (v.empty()) e.erase(k);
    else e[k] = v;
    return refused(e);
  };
  EXPECT_EQ(with("WORLD_SIZE", ""), "WORLD_SIZE") << "RANK without WORLD_SIZE";
  EXPECT_EQ(with("RANK", "4"), "RANK") << "RANK >= WORLD_SIZE";
  EXPECT_EQ(with("RANK", "-1"), "RANK");
  EXPECT_EQ(with("RANK", "one"), "RANK");
  EXPECT_EQ(with("WORLD_SIZE", "0"), "WORLD_SIZE");
  EXPECT_EQ(with("LOCAL_WORLD_SIZE", "5"), "LOCAL_WORLD_SIZE") << "more local ranks than ranks";
  EXPECT_EQ(with("LOCAL_RANK", "4"), "LOCAL_RANK") << "LOCAL_RANK >= LOCAL_WORLD_SIZE (defaults to WORLD_SIZE)";
  EXPECT_EQ(with("MASTER_PORT", ""), "MASTER_PORT") << "MASTER_ADDR without MASTER_PORT";
  EXPECT_EQ(with("MASTER_PORT", "70000"), "MASTER_PORT");
  EXPECT_EQ(with("MASTER_PORT", "0"), "MASTER_PORT");
  EXPECT_EQ(with("MASTER_ADDR", ""), "MASTER_ADDR") << "a world of 4 with no rendezvous";
  EXPECT_EQ(with("PARITY_COMM_TIMEOUT_MS", "0"), "PARITY_COMM_TIMEOUT_MS");
  EXPECT_EQ(with("PARITY_BACKEND", "mpi"), "PARITY_BACKEND") << "mpi without mpirun";
  EXPECT_EQ(refused({{"WORLD_SIZE", "4"}}), "RANK") << "WORLD_SIZE without RANK";
  EXPECT_EQ(refused({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "1"}}), "SLURM_NTASKS");
  EXPECT_EQ(refused({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "1"}, {"SLURM_NTASKS", "2"}}), "MASTER_ADDR")
      << "no node list and no MASTER_ADDR";
  EXPECT_EQ(refused({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODELIST", "a"}}),
            "MASTER_PORT")
      << "neither MASTER_PORT nor SLURM_JOB_ID";
  EXPECT_EQ(refused({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "9"},
                     {"SLURM_NODELIST", "a[3-1]"}}),
            "SLURM_NODELIST");
  EXPECT_EQ(refused({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "9"},
                     {"SLURM_NODELIST", "a"}, {"SLURM_TASKS_PER_NODE", "1(x2)"}, {"SLURM_NODEID", "2"}}),
            "SLURM_NODEID");
  // A world of one needs no rendezvous at all.
  EXPECT_EQ(refused({{"RANK", "0"}, {"WORLD_SIZE", "1"}}), "");
}

TEST(Hostlist, ExpandsSlurmForms) {
  EXPECT_EQ(hosts("node1"), "node1");
  EXPECT_EQ(hosts("node[1-3,5]"), "node1 node2 node3 node5");
  EXPECT_EQ(hosts("gpu[08-10]"), "gpu08 gpu09 gpu10");
  EXPECT_EQ(hosts("a,b[1-2],c"), "a b1 b2 c");
  EXPECT_EQ(hosts("r[1-2]-n[1-2]"), "r1-n1 r1-n2 r2-n1 r2-n2");
  EXPECT_EQ(hosts("n[9-11].ib"), "n9.ib n10.ib n11.ib");
  EXPECT_EQ(hosts("x[7]"), "x7");
  EXPECT_EQ(hosts("10.213.0.[1-2]"), "10.213.0.1 10.213.0.2");
}

TEST(Hostlist, RefusesMalformedListsNamingTheVariable) {
  for (const char* bad : {"", "n[1-3", "n1-3]", "n[]", "n[a-b]", "n[3-1]", "n[1-2-3]", "a,,b", "n[1-99999999]"}) {
    try {
      parse_hostlist(bad, "SLURM_JOB_NODELIST");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.path(), "SLURM_JOB_NODELIST") << bad;
    }
  }
}

TEST(TasksPerNode, ExpandsRepeats) {
  EXPECT_EQ(parse_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(parse_tasks_per_node("4"), (std::vector<int>{4}));
  for (const char* bad : {"", "2(x)", "2(3)", "x", "0", "2(x0)"})
    EXPECT_THROW(parse_tasks_per_node(bad), ConfigError) << bad;
}
