"""The torch_npu operators that ``torch_npu.contrib``'s modules and functions call and that
the stand-in's operator families (:mod:`ascend_memsim.torchsim.ops`) do not model, one
family per module, named as torch_npu names them:

========================  ===============================================================
family                    operators
========================  ===============================================================
:mod:`.detection`         npu_roi_align, npu_roi_alignbk, npu_ps_roi_pooling (+ backward),
                          npu_deformable_conv2d, npu_deformable_conv2dbk, npu_batch_nms,
                          npu_bounding_box_encode, npu_bounding_box_decode,
                          npu_yolo_boxes_encode, npu_anchor_response_flags
:mod:`.dropout`           npu_dropout_gen_mask, npu_dropout_do_mask (+ npu_dropout_backward),
                          npu_dropout_with_add_softmax (+ backward)
:mod:`.attention`         npu_fused_attention_score_fwd, npu_fused_attention_score_grad,
    npu_fused_attention_layernorm_qkv_fwd,
                          npu_fused_attention_qkv_grad, npu_layernorm_grad,
                          npu_multi_head_attention (+ backward)
:mod:`.dense`             npu_linear (+ backward), npu_bmmV2, npu_one_hot,
                          npu_softmax_cross_entropy_with_logits (+ backward),
                          npu_trans_quant_param, npu_weight_quant_batchmatmul
========================  ===============================================================

Each is a Python function of the operator's arguments whose outputs have the shapes and
dtypes op-plugin's kernel gives them (``op_plugin/ops/aclops/*``, ``opapi/*``, Ascend/op-plugin
at 517f2e7d; the torch_npu 2.14.0 wheel's ``_meta_registrations.py`` where it has the
operator), made with torch's own operations on the estimate's fake tensors; where
``op_plugin/config/derivatives.yaml`` gives the operator a derivative and a contrib piece
reaches it with autograd on, a ``torch.autograd.Function`` keeps what torch_npu's generated
node keeps and its backward makes the gradient operator's outputs.

DECISION: they are not defined in torch's ``npu`` operator namespace (``torch.ops.npu``): a
torch library cannot define an operator twice, and an operator family of
:mod:`ascend_memsim.torchsim.ops` is where a ``torch_npu.npu_*`` name is defined; these serve
contrib alone until one of those families takes them. ESTIMATE: no workspace is counted for
them (the workspace table sizes the operators dispatched through ``torch.ops.npu``), and a
private format's padding (5HD, FRACTAL_NZ) is not modelled, as in
:mod:`ascend_memsim.torchsim.ops.layout`.
"""

__all__: list[str] = []
