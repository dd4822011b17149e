"""shishulm_600: ShishuLM 600, paper 001 (Kumar & Srinivasan, "ShishuLM"), sections 4.1-4.4, Table 7
(configuration) and Table 2 (408,506,112 parameters). Derived from MobileLLM-600M (mobilellm_600m).

Switched on, on top of MobileLLM-600M (width 1152, SwiGLU hidden 3072, GQA 18/6 heads, RMSNorm, RoPE,
no bias, tied embeddings, vocabulary 32000, context 2048, N(0, 0.02) initialisation as in 001 section 5):
  full decoder layers first, then ShishuMLP blocks (norm + MLP, no attention; 4.1):  n_attn_layers
  adjacent ShishuMLP blocks share weights in pairs (4.4):   share_from_layer=n_attn_layers, share_group_size=2

Which split. The parent has L=40 layers: L/3 = 13 decoder layers leaves 27, which cannot form pairs.
Table 7 lists ShishuLM 600 as 43 layers = 13 decoder layers + 15*2 ShishuMLP layers; that is this
preset (n_layer=43, n_attn_layers=13):
    380,189,952 parameters.
Table 2 reports 408,506,112, which is exactly two full decoder layers (2 x 14,158,080) more: 15 decoder
layers + 15 shared pairs (n_layer=45, i.e. the L/3 rule with L=45) reproduces it to the parameter, and
no other split of decoder layers and shared pairs does. As for ShishuLM 125 (one layer more in Table 2
than in Table 7) we follow Table 7 and keep Table 2's model as CONFIG_TABLE2:
    python train.py ... --variant=shishulm_600 --n_layer=45 --n_attn_layers=15 --share_from_layer=15
"""

from variants.mobilellm_600m import CONFIG as MOBILELLM_600M

CONFIG = dict(
    MOBILELLM_600M,
    n_layer=43,
    n_attn_layers=13,
    share_from_layer=13,
    share_group_size=2,
)

# Table 2's parameter count (408,506,112): two more full decoder layers
CONFIG_TABLE2 = dict(CONFIG, n_layer=45, n_attn_layers=15, share_from_layer=15)
