// FreeDeviceIndex: the live workers' devices per device kind and pool — how many there are, how many are
// free, and the workers with free devices in placement's order (most free first, then by id) — so that
// placement and the queue's reasons read only the workers they use, and totals are counters. One part
// of the coordinator's scheduling state; not thread-safe (the coordinator's lock guards it).
#ifndef TESSERA_COORDINATOR_FREE_DEVICE_INDEX_H_
#define TESSERA_COORDINATOR_FREE_DEVICE_INDEX_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "tessera/v1/cluster.pb.h"

namespace tessera::coordinator {

// Devices of one kind in one pool (a job's: its device and placement.pool).
using PoolKey = std::pair<v1::DeviceKind, std::string>;

class FreeDeviceIndex {
 public:
  // What one worker contributes: nothing unless alive; else `devices` of `key`, `free` of them free
  // (0 <= free <= devices).
  struct Worker {
    bool alive = false;
    PoolKey key{v1::DEVICE_KIND_UNSPECIFIED, ""};
    int devices = 0;
    int free = 0;
    bool operator==(const Worker& o) const {
      return alive == o.alive && key == o.key && devices == o.devices && free == o.free;
    }
  };

  // Replaces worker `id`'s contribution (after every change of its state, pool, devices or used devices).
  void Set(const std::string& id, const Worker& worker);

  int64_t Free(const PoolKey& key) const;     // Free devices of live workers.
  int64_t Devices(const PoolKey& key) const;  // Devices of live workers, used or not.
  // Live workers of `key` with a free device, as (−free devices, worker id): placement's order.
  const std::set<std::pair<int, std::string>>& ByFree(const PoolKey& key) const;

  // "" when `other` holds the same totals and order for every key (a key emptied in one and absent in
  // the other counts as equal); else the first key that differs: "kind K pool P: F free of D on W
  // workers; the other: F' of D' on W'".
  std::string Difference(const FreeDeviceIndex& other) const;

 private:
  struct Pool {
    std::set<std::pair<int, std::string>> by_free;
    int64_t free = 0;
    int64_t devices = 0;
  };
  std::map<PoolKey, Pool> pools_;
  std::map<std::string, Worker> workers_;  // Each worker's contribution as last Set.
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_FREE_DEVICE_INDEX_H_
