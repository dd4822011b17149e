"""baseline: the Baseline model of paper 000 (Yu, "Efficient parameter optimization for compact language
models"), section 2.1 and Table 1: d_model 768, d_hidden 1536, 12 heads, 12 layers, 134.0M.

Each choice and where it comes from ("code" = the authors' public code, colin31472/Parameter_Optimization-
MobileLLM, `code/1. Baseline_134.0M.py`, used where the paper is silent):
  GPT-2 decoder-only model                 paper 2.1 ("The GPT-2 decoder-only model was used as the baseline")
  FFN Linear -> ReLU -> Linear, 1536       paper 2.3 ("In the traditional FFN approach, the ReLU activation
                                           function is used"), Table 1; code: nn.Sequential(Linear, ReLU, Linear)
  post-norm: x <- LayerNorm(x + F(x))      code (GPTBlock: ln1(logits + att_logits), ln2(...)); no final norm
  LayerNorm and Linear layers with biases  code (nn.LayerNorm, nn.Linear defaults)
  sinusoidal positions                     code (PositionalEncoding: sin/cos, no parameters)
  untied head with a bias                  code (linear1 = nn.Linear(d_model, vocab_size)); paper 2.4 says
                                           sharing is what saves the ~25M, so the baseline has two matrices
  vocabulary 50257 (GPT-2)                 code (AutoTokenizer "gpt2", tokenizer.vocab_size)
  context 128                              code (context_length = 128); the paper gives none
Parameters: 133,969,489 = Table 1's 134.0M.
Ours, not the authors': the init (GPT-2's, std 0.02; their code keeps PyTorch's defaults, N(0, 1) for this
embedding). Next to the sinusoids (amplitude 1) the token signal is then ~35x weaker, and small models sit at
the unigram loss: results/paper000_cpu/README.md trains them with --pos_embedding=learned, and says why.
"""

CONFIG = dict(
    vocab_size=50257,
    block_size=128,
    n_layer=12,
    n_head=12,
    n_embd=768,
    bias=True,
    norm="layernorm",
    norm_placement="post",
    pos_embedding="sinusoidal",
    mlp_type="standard",
    activation="relu",
    mlp_hidden=1536,
    tie_embeddings=False,
    head_bias=True,
)
