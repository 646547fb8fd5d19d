#include "tide/comm/work_watchdog.h"

#include <algorithm>
#include <exception>
#include <string_view>

#include <fmt/format.h>

#include "tide/comm/watchdog.h"

namespace tide {

WorkWatchdog::WorkWatchdog(std::function<double()> timeout_s, OnFailure on_failure,
                           std::chrono::milliseconds poll)
    : timeout_s_(std::move(timeout_s)), on_failure_(std::move(on_failure)), poll_(poll) {
  thread_ = std::thread([this] { loop(); });
}

WorkWatchdog::~WorkWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void WorkWatchdog::watch(WorkPtr work, std::string what) {
  std::lock_guard<std::mutex> lock(mu_);
  watched_.push_back({std::move(work), std::move(what), std::chrono::steady_clock::now()});
}

WorkWatchdog::Registration::~Registration() {
  owner_->remove_communicator(id_);
}

std::unique_ptr<WorkWatchdog::Registration> WorkWatchdog::add_communicator(
    std::function<void()> abort, std::function<std::string()> error) {
  std::lock_guard<std::mutex> lock(comm_mu_);
  const int id = next_id_++;
  communicators_.push_back({id, std::move(abort), std::move(error)});
  return std::unique_ptr<Registration>(new Registration(this, id));
}

void WorkWatchdog::remove_communicator(int id) {
  std::lock_guard<std::mutex> lock(comm_mu_);
  std::erase_if(communicators_, [id](const Communicator& c) { return c.id == id; });
}

size_t WorkWatchdog::watched() const {
  std::lock_guard<std::mutex> lock(mu_);
  return watched_.size();
}

bool WorkWatchdog::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

bool WorkWatchdog::check(Failure& failure) {
  // Polled outside mu_ (a query may take a while); calls watched meanwhile wait at the back.
  std::list<Watched> polled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    polled.swap(watched_);
  }
  const auto now = std::chrono::steady_clock::now();
  const double timeout = timeout_s_();
  bool failed = false;
  for (auto it = polled.begin(); it != polled.end() && !failed;) {
    const double waited = std::chrono::duration<double>(now - it->issued).count();
    bool completed = false;
    try {
      completed = it->work->is_completed();
    } catch (const std::exception& e) {  // a device error seen through the call's event
      failure = {it->what, waited, e.what()};
      failed = true;
      break;
    }
    if (completed) {
      it = polled.erase(it);
    } else if (waited > timeout) {  // the oldest hung call: calls are kept in issue order
      failure = {it->what, waited, ""};
      failed = true;
    } else {
      ++it;
    }
  }
  for (const Communicator& c : communicators_) {
    if (failed) break;
    if (!c.error) continue;
    std::string error = c.error();
    if (!error.empty()) {
      failure = {"", 0, std::move(error)};
      failed = true;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  watched_.splice(watched_.begin(), polled);
  return failed;
}

void WorkWatchdog::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, poll_, [&] { return stop_; })) return;
    }
    Failure failure;
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      if (!check(failure)) continue;
      // Abort first: the host thread blocked on a hung call, and the device's kernels, go free.
      for (const Communicator& c : communicators_) c.abort();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      fired_ = true;
    }
    on_failure_(failure);
    return;
  }
}

DeviceCallWatch device_call_watch(ProcessGroup& bootstrap, Device device) {
  ProcessGroup::WatchdogLink link = bootstrap.watchdog_link();
  if (!link.watchdog) return {};
  const std::string on = " on " + device.str();
  const std::string in_group = group_suffix(link.world_ranks, link.world_size);
  DeviceCallWatch w;
  w.watch = [=, dog = link.watchdog](WorkPtr work, const char* op, uint64_t bytes, int peer) {
    const std::string_view name(op);
    std::string what =
        name == "barrier" ? std::string(name) : fmt::format("{} of {}", name, human_bytes(bytes));
    if (peer >= 0)
      what +=
          fmt::format(" {} {}", name == "send" ? "to" : "from", peer_name(link.world_ranks, peer));
    // A point-to-point call's peer names the group already.
    what += on + (name == "send" || name == "recv" ? "" : in_group);
    dog->watch(std::move(work), std::move(what));
  };
  w.add_communicator = [dog = link.watchdog](std::function<void()> abort,
                                             std::function<std::string()> error) {
    // The token keeps the watchdog alive: a Registration outliving it would point nowhere.
    return std::shared_ptr<void>(
        dog->add_communicator(std::move(abort), std::move(error)).release(),
        [dog](void* r) { delete static_cast<WorkWatchdog::Registration*>(r); });
  };
  return w;
}

}  // namespace tide
