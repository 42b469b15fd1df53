"""The networks of every algorithm, one concern per module:

* :mod:`.mlp`: host-initialized Dense layers, the MLP trunk, the accurate tanh activation;
* :mod:`.image`: the in-cell image preprocessing and the convolutional trunks;
* :mod:`.encoders`: observation encoders (one-hot, Dict, image) in front of a trunk;
* :mod:`.heads`: action heads and :class:`~.heads.PolicyCell`, the export target;
* :mod:`.stacked`: K copies of one MLP on a leading member axis (a population's update);
* :mod:`.agents`: the Agent base and the off-policy building blocks (Q network, target copies).
"""
