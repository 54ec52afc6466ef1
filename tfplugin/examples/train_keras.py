"""Demo: trains a small Keras model with allreduced's DistributedOptimizer on data it generates
(each rank its own shard), prints per-epoch loss and accuracy from rank 0, and checks at the end
that every rank holds bit-identical weights.

    python -m allreduced.launch --sockets A.sock,B.sock -np 4 -- python train_keras.py
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import allreduced.tensorflow.keras as hvd  # noqa: E402


class PrintEpochs(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if hvd.rank() == 0:
            print(f"epoch {epoch + 1}: loss {logs['loss']:.4f} accuracy {logs['accuracy']:.4f}",
                  flush=True)


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    # A two-class problem: points inside or outside a sphere; each rank gets its own samples.
    rng = np.random.default_rng(1234 + rank)
    x = rng.normal(size=(2048, 8)).astype(np.float32)
    y = (np.linalg.norm(x, axis=1, keepdims=True) > np.sqrt(8)).astype(np.float32)
    keras.utils.set_random_seed(rank)  # different starting weights: the broadcast aligns them
    model = keras.Sequential([keras.Input(shape=(8,)),
                              keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.003 * size)),
                  loss="binary_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=64, epochs=5, verbose=0,
              callbacks=[hvd.BroadcastGlobalVariablesCallback(0), hvd.MetricAverageCallback(),
                         PrintEpochs()])
    flat = np.concatenate([w.ravel() for w in model.get_weights()])
    everyone = hvd.allgather(tf.constant(flat[None, :]), name="final.weights").numpy()
    if not np.all(everyone == everyone[0]):
        raise SystemExit("weights differ between ranks")
    if rank == 0:
        print(f"weights identical on all {size} ranks ({flat.size} parameters)", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
