// Planner: chooses dp × pp × tp (1D/2D/2.5D/3D) × sp for a GPT on N devices from a cost model, and
// explains the ranking. No torch and no proto here (the CLI links it); the layout rules are
// CheckLayout's (layout/check_layout.h), the grid arithmetic TpGrid's.
//
// Per candidate layout, per device and per optimizer step (fp32 training, AdamW, no ZeRO):
//   compute  6·Ψ·tokens + 12·L·T·h·tokens FLOPs (×4/3 with activation checkpointing), split evenly
//            over the devices, at `flops` per second, stretched by the pipeline bubble of the
//            schedule (simulated: (p−1)/(m+p−1) for 1F1B, (p−1)/(v·m+p−1) interleaved);
//   comm     bytes sent per device by each mode's collectives (CommBytes below: ring all-reduce
//            2(n−1)/n·S, all-gather / reduce-scatter (n−1)/n·S, SUMMA broadcasts and reductions,
//            ring attention's key/value hops, all-to-all (n−1)/n·S, pipeline activations) at
//            `bandwidth` bytes per second, not overlapped with compute;
//   memory   parameters, gradients and AdamW moments of the device's shard (16 bytes per
//            parameter) plus activations kept for backward: per token and layer ~20·h values
//            (+ attention probabilities 2·a·T where materialised), split as each mode splits
//            them, times the micro-batch chunks alive at the pipeline's peak (simulated), plus the
//            logits of the last stage, plus backward's working set (one layer's activation
//            gradients, two fresh gradients of the largest weight), plus the device's fixed runtime
//            memory.
// A Mixture of Experts: compute from the active parameters (experts_per_token experts per sparse
// block); every ep out of dp that divides the experts is a candidate; the experts' parameters are split
// over ep in the state and their gradients all-reduced over their dp/ep replicas only; each sparse
// block adds 4 all-to-alls of the tokens' k assignment rows per micro-batch ((ep−1)/ep, 6 with
// activation checkpointing).
// A layout is rejected when its memory exceeds `memory_bytes` per device.
#ifndef TESSERA_PLAN_PLANNER_H_
#define TESSERA_PLAN_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "layout/check_layout.h"
#include "layout/model_config.h"
#include "layout/parallel_layout.h"

namespace tessera::plan {

using layout::ModelConfig;
// A candidate layout (its order is not planned: the default; its ZeRO stage is the input's).
using Layout = layout::ParallelLayout;

struct DeviceModel {
  double flops = 50e9;            // Achieved fp32 matmul FLOP/s per device.
  double bandwidth = 2e9;         // Bytes per second a device sends in collectives.
  double memory_bytes = 8e9;      // Per device.
  double runtime_bytes = 0;       // Per process before any activation (allocator, kernels' scratch).
};

struct PlanInput {
  ModelConfig model;
  int micro_batch = 8;            // Samples per micro-batch (per dp rank).
  int global_batch = 8;           // Samples per step.
  int devices = 1;
  bool activation_checkpointing = false;
  DeviceModel device;
  layout::Target target;          // The device kind and precision whose rules CheckLayout applies.
  // The spec's ZeRO stage: candidates carry it for CheckLayout's rules (the cost model assumes none).
  layout::ZeroStage zero_stage = layout::ZeroStage::kNone;
};


struct Prediction {
  Layout layout;
  double compute_s = 0;           // Including the bubble.
  double comm_s = 0;
  double step_s = 0;
  double bubble = 0;              // Fraction of the step.
  double comm_bytes = 0;          // Per device per step.
  double state_bytes = 0;         // Parameters, gradients, moments per device.
  double activation_bytes = 0;    // Peak per device.
  double runtime_bytes = 0;       // DeviceModel::runtime_bytes.
  double memory_bytes() const { return state_bytes + activation_bytes + runtime_bytes; }
  bool fits = true;
  std::string verdict;            // Why it ranks where it does.
};

// Every valid layout for the input, fastest fitting first (then the ones that do not fit, by memory).
// The first entry's verdict says "chosen"; the others say why they lost.
std::vector<Prediction> Plan(const PlanInput& input);

// One layout's prediction (also for layouts the enumeration would not produce).
Prediction Predict(const PlanInput& input, const Layout& layout);

// Whether `layout` can run `input` at all: its ranks are the device count and CheckLayout accepts it
// (layout/check_layout.h). Empty when it can, else the first reason ("field: message").
std::string Invalid(const PlanInput& input, const Layout& layout);

}  // namespace tessera::plan

#endif  // TESSERA_PLAN_PLANNER_H_
