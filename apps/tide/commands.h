#pragma once
// Each subcommand of `tide` lives in its own file and adds itself to the app here.

#include <CLI/CLI.hpp>

namespace tide::app {

void add_train_command(CLI::App& app);     // train.cpp
void add_prepare_command(CLI::App& app);   // prepare.cpp
void add_sample_command(CLI::App& app);    // sample.cpp
void add_estimate_command(CLI::App& app);  // estimate.cpp
void add_schedule_command(CLI::App& app);  // schedule.cpp
void add_export_command(CLI::App& app);    // export.cpp
void add_import_command(CLI::App& app);    // import.cpp

}  // namespace tide::app
