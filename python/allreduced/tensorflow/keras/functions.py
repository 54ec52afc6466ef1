"""broadcast_global_variables of horovod.tensorflow.keras: the tensorflow function's op, run in
Keras's session (tf_keras in graph mode, i.e. under tf.compat.v1.disable_eager_execution())."""
import tensorflow as tf

from allreduced.tensorflow import collectives


def broadcast_global_variables(root_rank):
    """Assigns every global variable (the model's and the optimizer's included) its value on
    `root_rank`, in Keras's session. Graph mode only, like Horovod's: in eager mode (always, with
    Keras 3) it raises RuntimeError; use BroadcastGlobalVariablesCallback or
    broadcast_variables(model.variables, root_rank) there."""
    op = collectives.broadcast_global_variables(root_rank)
    return tf.compat.v1.keras.backend.get_session().run(op)
