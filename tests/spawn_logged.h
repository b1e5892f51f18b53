// Starting a child process in tests with its stdout and stderr going to a log file.
#pragma once
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace fbt::testing {

/// posix_spawn of args[0] with `args` and the environment `env` ("KEY=VALUE" strings; this
/// process's environment when empty), stdout and stderr to `log` (truncated). Returns the pid.
inline pid_t spawn_logged(const std::vector<std::string>& args, const std::filesystem::path& log,
                          std::vector<std::string> env = {}) {
  if (env.empty())
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
  std::vector<std::string> argv_s = args;
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  for (auto& e : env) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

}  // namespace fbt::testing
