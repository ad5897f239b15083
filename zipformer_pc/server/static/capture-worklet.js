// Collects the microphone's first channel into blocks of `blockSize` samples
// and posts each block (a Float32Array) to the page.
class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.blockSize = (options.processorOptions && options.processorOptions.blockSize) || 4096;
    this.block = new Float32Array(this.blockSize);
    this.filled = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (input && input.length > 0) {
      const x = input[0];
      let i = 0;
      while (i < x.length) {
        const n = Math.min(x.length - i, this.blockSize - this.filled);
        this.block.set(x.subarray(i, i + n), this.filled);
        this.filled += n;
        i += n;
        if (this.filled === this.blockSize) {
          this.port.postMessage(this.block);
          this.block = new Float32Array(this.blockSize);
          this.filled = 0;
        }
      }
    }
    return true;
  }
}

registerProcessor("capture-processor", CaptureProcessor);
