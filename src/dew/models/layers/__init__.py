"""Blocks that two or more model families share.

attention (attention(), RoPE, `Attention`), norms, mlp, modulation (adaLN, `ModulatedHead`),
conditioning (`TimeEmbedding`, `TextPool`, `TimestepMlp`), joint (the MMDiT `JointBlock` and
`joint_blocks`), patches (`PatchEmbed`, patchify, unpatchify), embeddings (fixed features and
positions), conv (the UNets' convolutions and `ResnetBlock`), ssm (S5) and text_condition
(the caption table).
"""
