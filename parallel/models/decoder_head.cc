// The decoder's heads: the language-model head with its vocab-parallel cross-entropy (1D and grid
// layouts), the score head of a reward model, and the sum over a sample's sequence blocks that both
// hand the objective (TargetLosses::sum_over_sample_split).
#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

#include "kernels/fused_ops.h"
#include "parallel/layers/linear.h"
#include "parallel/layers/tp2d_ops.h"
#include "parallel/layers/tp_ops.h"
#include "parallel/models/decoder.h"

namespace tessera::parallel {

std::function<at::Tensor(const at::Tensor&)> Decoder::SampleSplitSum() const {
  if (!sp_ || sp_->size() <= 1) return nullptr;
  Communicator* sp = sp_.get();
  return [sp](const at::Tensor& x) {
    // Forward: the sum over the sequence blocks. Backward: the gradient times sp — every block's rank
    // computes the objective of the whole samples, and the Trainer weighs each one's loss 1/sp of the
    // micro-batch's (TargetLosses::WholeSamples).
    const double n = sp->size();
    const at::Tensor sum = ReduceFromTp(x, sp);
    return sum * n - (sum * (n - 1)).detach();
  };
}

at::Tensor Decoder::ScoreHead(const at::Tensor& x_in, const at::Tensor& targets) {
  if (shape_.mode != TpMode::k1D) {
    // This rank's samples, their hidden states split along the grid's hidden axis as score.weight is
    // (tp_layout.cc): the products at the trained targets' positions summed over that axis; the loss
    // the mean over the axes that split the samples, as the LM head's.
    const at::Tensor flat = targets.reshape({-1});
    const at::Tensor rows =
        (masked_targets_ ? flat >= 0 : at::ones({flat.numel()}, flat.options().dtype(at::kBool))).nonzero().squeeze(1);
    at::Tensor x = GridNorm(x_in, family_.final_norm);
    if (logit_scale_ != 1) x = x * logit_scale_;
    x = x.reshape({-1, x.size(-1)}).index_select(0, rows);
    const at::Tensor partial = at::matmul(x, Use(formats::model::kScoreWeight).t()).squeeze(-1);
    const at::Tensor scores = ReduceFromTp(partial, grid_.row).to(at::kFloat);
    at::Tensor loss = objective_->Loss({.rows = rows,
                                        .scores = scores,
                                        .sample_data = sample_data_,
                                        .samples = targets.size(0),
                                        .positions = targets.size(1),
                                        .targets = targets.numel(),
                                        .sum_over_sample_split = SampleSplitSum()});
    for (size_t a = 0; a + 1 < axes_.size(); ++a) loss = ReduceFromTp(loss / axes_[a]->size(), axes_[a].get());
    return loss;
  }
  // The positions scored: those loss_rows_ selected (x holds only them, [1, N, hidden]), else the
  // trained targets' of `targets` [B, T]. Every tp rank holds the whole hidden state after the last
  // block and computes the same scores from the replicated head: no reduction either way.
  at::Tensor rows = loss_rows_;
  at::Tensor x = x_in.reshape({-1, x_in.size(-1)});
  if (!rows.defined()) {
    rows = (masked_targets_ ? targets.reshape({-1}) >= 0 : at::ones({targets.numel()}, targets.options().dtype(at::kBool)))
               .nonzero()
               .squeeze(1);
    x = x.index_select(0, rows);
  }
  x = Norm(x.unsqueeze(0), family_.final_norm, fused_kernels_).squeeze(0);
  const at::Tensor scores = at::matmul(x, P(formats::model::kScoreWeight).t()).squeeze(-1).to(at::kFloat);
  return objective_->Loss({.rows = rows,
                           .scores = scores,
                           .sample_data = sample_data_,
                           .samples = targets.size(0),
                           .positions = targets.size(1),
                           .targets = loss_rows_.defined() ? loss_positions_ : targets.numel(),
                           .sum_over_sample_split = SampleSplitSum()});
}

at::Tensor Decoder::Head(const at::Tensor& x_in, const at::Tensor& targets) {
  if (config_.score_head) {
    if (hooks_ && !part_.embedding) hooks_->PreForward(0, false);
    at::Tensor loss = ScoreHead(x_in, targets);
    if (hooks_) loss = hooks_->PostForward(0, loss);
    return loss;
  }
  Communicator* tp = tp_.get();
  const int64_t B = x_in.size(0), T = x_in.size(1);
  const int64_t vocab_start = tp->rank() * VocabPart();
  if (hooks_ && !part_.embedding) hooks_->PreForward(0, false);
  if (shape_.mode != TpMode::k1D) {
    // Logits of this rank's samples: the hidden-split products summed over the hidden axis and
    // scattered by vocabulary, then the vocab-parallel loss over that axis; the mean over the axes
    // that split the samples.
    at::Tensor x = GridNorm(x_in, family_.final_norm);
    const std::string head = tied_.empty() ? family_.lm_head + ".weight" : tied_;
    at::Tensor partial = at::matmul(x, Use(head).t());  // [B, T, V], partial over the hidden axis.
    at::Tensor logits = ReduceScatterAlong(partial, 2, grid_.row);
    const int64_t start = grid_.row->rank() * (config_.vocab / grid_.q);
    const at::Tensor flat_targets = targets.reshape({B * T});
    at::Tensor losses = VocabParallelCrossEntropy(logits.reshape({B * T, -1}),
                                                  masked_targets_ ? RealIds(flat_targets) : flat_targets, start,
                                                  grid_.row);
    at::Tensor loss = objective_->Loss({.nll = losses,
                                        .trained = masked_targets_ ? flat_targets >= 0 : at::Tensor(),
                                        .target_weight = target_weight_,
                                        .sample_data = sample_data_,
                                        .samples = B,
                                        .positions = T,
                                        .targets = B * T,
                                        .sum_over_sample_split = SampleSplitSum()});
    for (size_t a = 0; a + 1 < axes_.size(); ++a) loss = ReduceFromTp(loss / axes_[a]->size(), axes_[a].get());
    if (hooks_) loss = hooks_->PostForward(0, loss);
    return loss;
  }
  at::Tensor x = Norm(x_in, family_.final_norm, fused_kernels_);
  if (logit_scale_ != 1) x = x * logit_scale_;
  const std::string head = tied_.empty() ? family_.lm_head + ".weight" : tied_;
  at::Tensor logits = Linear(CopyToTp(x, tp), P(head));  // [B, T, VocabPart()].
  // Padding rows of the vocabulary (past vocab) are no tokens: out of the softmax.
  const int64_t real = std::clamp<int64_t>(config_.vocab - vocab_start, 0, VocabPart());
  if (real < VocabPart()) {
    logits = logits.narrow(-1, 0, real);
    logits = at::constant_pad_nd(logits, {0, VocabPart() - real}, -std::numeric_limits<double>::infinity());
  }
  // Low-precision logits: the softmax and the loss are computed in fp32 — by the fused kernel
  // reading the 16-bit logits, or by ATen on an fp32 copy.
  const kernels::FusedKernels* k = kernels::SelectKernels(logits, fused_kernels_);
  if (k == nullptr && logits.scalar_type() != at::kFloat) logits = logits.to(at::kFloat);
  at::Tensor flat_targets = targets.reshape({-1});
  if (loss_rows_.defined()) flat_targets = flat_targets.index_select(0, loss_rows_);  // x holds these rows.
  at::Tensor losses = VocabParallelCrossEntropy(logits.view({B * T, -1}),
                                                masked_targets_ ? RealIds(flat_targets) : flat_targets,
                                                vocab_start, tp, k);
  // With loss_rows_, x holds those rows of the forward's [B', T'] positions (B = 1, T = N here).
  const int64_t samples = loss_rows_.defined() ? targets.size(0) : B;
  const int64_t positions = loss_rows_.defined() ? targets.size(1) : T;
  at::Tensor loss = objective_->Loss({.nll = losses,
                                      .rows = loss_rows_,
                                      .trained = masked_targets_ ? flat_targets >= 0 : at::Tensor(),
                                      .target_weight = target_weight_,
                                      .sample_data = sample_data_,
                                      .samples = samples,
                                      .positions = positions,
                                      .targets = loss_rows_.defined() ? loss_positions_ : B * T,
                                      .sum_over_sample_split = SampleSplitSum()});
  if (hooks_) loss = hooks_->PostForward(0, loss);
  return loss;
}

}  // namespace tessera::parallel
