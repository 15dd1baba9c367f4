// Token-bucket rate limiter shared by the billing API gateway.

export interface BucketOptions {
  capacity: number;
  refillPerSecond: number;
}

// A bucket refills continuously; each request takes one token.
export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(private readonly options: BucketOptions) {
    this.tokens = options.capacity;
    this.last = Date.now();
  }

  tryTake(): boolean {
    const now = Date.now();
    const elapsed = (now - this.last) / 1000;
    this.tokens = Math.min(this.options.capacity, this.tokens + elapsed * this.options.refillPerSecond);
    this.last = now;
    if (this.tokens < 1) {
      return false;
    }
    this.tokens -= 1;
    return true;
  }
}

// Returns the HTTP status a gateway answers when the bucket is empty.
export function rejectStatus(): number {
  return 429;
}
