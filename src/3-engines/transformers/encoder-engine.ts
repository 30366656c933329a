import type { Head } from "./encoder-worker";
import { Encoder, type EncoderOptions } from "./encoder";
import { MicroBatcher } from "./micro-batcher";
import type { FolderInfo } from "./model-folder";

// What the classifier, the reranker and the embedding engine share: the model folder read once,
// one encoder (tokenizer here, ONNX session in its worker), and a micro-batcher so concurrent
// requests share model runs. A subclass says how its folder is read, which head the worker
// applies, and how one batch's output becomes one answer per item.

export abstract class EncoderEngine<Info extends FolderInfo, Item, Out> {
  private info: Info | null = null;
  protected readonly encoder: Encoder;
  private readonly batcher: MicroBatcher<Item, Out>;

  constructor(
    protected readonly opts: EncoderOptions,
    task: "embedding" | "classifier" | "reranker",
    /** An item's cost in the micro-batcher's budget (its tokens). */
    cost: (item: Item) => number,
  ) {
    this.encoder = new Encoder(opts, task, () => {
      const { head, describe } = this.setup(this.describe());
      return { dtype: this.describe().dtype, head, describe: { max_tokens: this.maxTokens, ...describe } };
    });
    this.batcher = new MicroBatcher((items) => this.run(items), cost, opts.batch);
  }

  /** Reads the model folder (once, at load or first question). */
  protected abstract readFolder(folder: string): Info;
  /** The head the worker applies to the encoder's output, and what the load log line adds. */
  protected abstract setup(info: Info): { head: Head; describe: Record<string, unknown> };
  /** One model run over a micro-batch: one answer per item, in order. */
  protected abstract run(items: Item[]): Promise<Out[]>;

  get modelId() {
    return this.opts.modelId;
  }
  get loaded() {
    return this.encoder.loaded;
  }
  get device() {
    return this.encoder.device;
  }
  /** Tokens per item: the model's own limit, or the manifest's max_context if smaller. */
  get maxTokens() {
    return Math.min(this.describe().maxTokens, this.opts.maxContext ?? Infinity);
  }
  /** Model runs so far: fewer than requests when concurrent requests were batched. */
  get runs() {
    return this.batcher.runs;
  }
  /** ONNX session calls so far (a batch is length-sorted and may take several). */
  get modelCalls() {
    return this.encoder.calls;
  }

  describe(): Info {
    return (this.info ??= this.readFolder(this.opts.folder));
  }

  async load(): Promise<void> {
    await this.encoder.ensure();
  }

  async unload(): Promise<void> {
    await this.encoder.unload();
  }

  /** Queues items for the next model run (shared with concurrent requests). */
  protected submit(items: Item[], signal?: AbortSignal): Promise<Out[]> {
    return this.batcher.submit(items, signal);
  }
}
