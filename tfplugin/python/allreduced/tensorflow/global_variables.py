"""broadcast_global_variables: Horovod's TF1 idiom, for graph mode (tf.compat.v1) only."""
import tensorflow as tf

from allreduced.tensorflow.collectives import broadcast


def broadcast_global_variables(root_rank):
    """An op that assigns every tf.compat.v1.global_variables() variable its value on
    `root_rank` (run it in the session). Graph mode only, like Horovod's: in eager mode there
    is no global variable collection; use broadcast_variables(model.variables, root_rank)."""
    if tf.executing_eagerly():
        raise RuntimeError("broadcast_global_variables() does not support eager execution; use "
                           "broadcast_variables(<model and optimizer variables>, root_rank)")
    return tf.group(*[v.assign(broadcast(v.read_value(), root_rank,
                                         name=f"broadcast_global_variables.{i}"))
                      for i, v in enumerate(tf.compat.v1.global_variables())])
